"""Data files shipped with gpuscale (each folder carries its licence)."""
