"""Dynamic Resource Allocation as kube-scheduler v1.37 decides it: CEL device selectors (`cel`), the pools a node may
allocate from (`pools`), consumable capacity and shared counters (`capacity`), claim constraints (`constraints`) and
the structured allocator's search (`allocate`). Pure functions of `model.dra` values; the what-if's DynamicResources
filter asks `allocate`."""
