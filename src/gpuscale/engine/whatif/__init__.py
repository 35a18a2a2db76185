"""The what-if: one model of "can this pod go on this node, and what happens if it does?" — what kube-scheduler would
do — that every decision asks.

Rows are usable nodes, upcoming nodes (as their pool's template) and pool templates added for scale-up. A row holds
its node, its free resources (integers over the columns: every resource a node offers or a pod requests), its free pod
slots, its GPU devices (per-device free milli, `engine.placement.devices`) and, when some pod uses inter-pod
(anti-)affinity, the topology state those filters read (`engine.scheduling.Topology`).

Operations (`model.WhatIf`), with their costs (n rows, r columns):
- `feasible(pod) -> mask`: every filter of kube-scheduler's default profile for the pod, one vectorised pass,
  O(n × asked columns), the node-only filters cached per constraints and node group, inter-pod affinity O(candidates);
- `explain(pod, row) -> failures`: why one row rejects the pod, in kube-scheduler's words, O(r + affinity);
  both run the filters of `filters` (one class per kube-scheduler filter, with its wording), in the profile's order;
- `choose(pod, mask)`: the row the pod goes on (first fit, or least fragmentation for GPU pods), O(candidates);
- `place` / `unplace(row, pod)`: a pod in or out, O(r + devices); `disable(row)`: a row out of consideration, O(1);
  `remove(row)`: its node leaves (scale-down), O(placed pods) with a topology;
- `extend(nodes, capacity)` (`add templates`): rows appended, O((n + k) × r); `fork()`: an independent copy,
  O(n × r), nothing to revert.
- `depends_on_placed` (`model.pod.depends_on_placed(pod)`; the property: for any pod of the what-if): whether
  the pod's placement depends on pods already placed (inter-pod affinity): one
  predicate for every shortcut that treats pods of a shape alike.

Where a what-if comes from is a store (`store`): the reference store rebuilds it from the snapshot, the incremental
store carries rows and facts from the last decision; both give the same what-if. Adding a kube-scheduler filter is
one module's work: docs/whatif.md.
"""
