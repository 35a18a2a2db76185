"""Pure decisions: scheduling semantics, packing, scale-up, scale-down. No I/O, no clock, no randomness."""
