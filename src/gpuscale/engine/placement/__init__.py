"""GPU placement scorers (the FGD paper's policies and ours) and the fragmentation measure they share.

Layout: `shapes` (pod/node values), `state` (the cluster as arrays), `frag` (typical pods, fragment amount),
`scorers` (Random, DotProd, GpuClustering, GpuPacking, BestFit), `fgd` (FGD), `gpuscale` (ours: FGD with
packing-aware tie-breaks), `loop` (the packing experiment), `gorand` (Go's math/rand stream, to draw what the
paper's artifact drew). Pure: randomness comes from the `RandomSource` the caller passes in.
"""

from __future__ import annotations

from gpuscale.engine.placement.fgd import FgdScorer
from gpuscale.engine.placement.frag import FragTable, TypicalClass, node_frag, typical_classes
from gpuscale.engine.placement.gorand import GoRand
from gpuscale.engine.placement.gpuscale import GpuscaleScorer
from gpuscale.engine.placement.loop import PackTrace, pack
from gpuscale.engine.placement.scorers import (
    BestFitScorer,
    ClusteringScorer,
    DotProductScorer,
    NodeScore,
    PackingScorer,
    RandomScorer,
    RandomSource,
    Scorer,
    score_node,
)
from gpuscale.engine.placement.shapes import NodeSpec, NodeState, PodShape
from gpuscale.engine.placement.state import ClusterState

PAPER_POLICIES = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd")
"""The paper's six policies, in its table order."""
POLICIES = (*PAPER_POLICIES, "gpuscale")
"""Every policy `make_scorer` knows: the paper's six and ours."""
_ALIASES = {"gpuclustering": "clustering", "gpupacking": "packing", "dotproduct": "dotprod"}


def policy_name(name: str) -> str:
    """Canonical policy name; accepts the paper's spelling (`GpuPacking`, `FGD`, …). Raises KeyError if unknown."""
    key = name.lower().replace("-", "").replace("_", "")
    key = _ALIASES.get(key, key)
    if key not in POLICIES:
        raise KeyError(name)
    return key


def make_scorer(name: str, table: FragTable) -> Scorer:
    """The scorer for a policy name; `table` (typical pods over the cluster's models) is used by FGD."""
    match policy_name(name):
        case "random":
            return RandomScorer()
        case "dotprod":
            return DotProductScorer()
        case "clustering":
            return ClusteringScorer()
        case "packing":
            return PackingScorer()
        case "bestfit":
            return BestFitScorer()
        case "fgd":
            return FgdScorer(table)
        case _:
            return GpuscaleScorer(table)


__all__ = [
    "PAPER_POLICIES", "POLICIES", "BestFitScorer", "ClusterState", "ClusteringScorer", "DotProductScorer",
    "FgdScorer", "FragTable", "GoRand", "GpuscaleScorer", "NodeScore", "NodeSpec", "NodeState", "PackTrace",
    "PackingScorer", "PodShape", "RandomScorer", "RandomSource", "Scorer", "TypicalClass", "make_scorer", "node_frag",
    "pack", "policy_name", "score_node", "typical_classes",
]
