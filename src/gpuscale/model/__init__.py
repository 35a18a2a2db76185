"""Frozen value objects: quantities, resources, pods, nodes, pools, budgets, pod groups.

Glossary
- **pod shape / equivalence class**: pods with the same requests and the same scheduling constraints; the engine packs
  classes, not pods.
- **pool**: a group of identical nodes the autoscaler can grow or shrink (a GKE node pool, an ASG, a MachineDeployment).
- **template**: the node a pool would add, as it will look once Ready with its GPUs registered.
- **offering**: a pool in one zone at one price (on-demand or spot).
- **upcoming node**: requested from the provider but not yet usable — not registered, not Ready, or Ready with fewer
  GPUs in allocatable than its pool's template (driver or device plugin still starting).
- **unneeded node**: a node whose pods could all move elsewhere and whose utilization is below the threshold; it is
  removed once it has been unneeded for `unneeded_time`.
- **plan**: what one decision wants done — scale-ups, removals — each item with its reasons.
- **gang / pod group**: pods that must start together (all-or-nothing).
- **shared GPU**: one physical GPU advertised as several `nvidia.com/gpu` (time-slicing, MPS replicas) or as MIG
  instances (`nvidia.com/mig-<profile>`, a layout per GPU); gpuscale counts in the units the scheduler sees
  (`model/gpu.py`).
- **fragmentation**: idle GPU capacity that the typical pods cannot use (the FGD paper's measure, docs/fgd.md).
"""
