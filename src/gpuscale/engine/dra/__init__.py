"""Dynamic Resource Allocation as kube-scheduler v1.37 decides it: CEL device selectors (`cel`), the pools a node may
allocate from (`pools`), the devices already allocated (`inuse`), consumable capacity and shared counters
(`capacity`), claim constraints (`constraints`), the structured allocator's search (`search`) and its entry point
with the caches around it (`allocate`). Pure functions of `model.dra` values; the what-if's DynamicResources filter
asks `allocate`."""
