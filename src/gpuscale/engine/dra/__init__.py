"""Dynamic Resource Allocation as kube-scheduler v1.37 decides it: CEL device selectors (`cel`). Pure functions of
`model.dra` values."""
