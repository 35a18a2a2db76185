"""Kueue's admission rules (`sim.admission`): quota, cohort borrowing and lending, flavor choice, preemption order and
the two FIFO strategies, plus a state machine that keeps the quota book within its limits."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gpuscale.sim.admission import (
    Admission,
    ClusterQueue,
    FlavorQuotas,
    Mode,
    PreemptionPolicy,
    QueueingStrategy,
    Quota,
    QuotaBook,
    Request,
    ResourceGroup,
    next_decision,
    queue_order,
)

GPU = "nvidia.com/gpu"
LABELS = {"a100": {"accelerator": "a100"}, "h100": {"accelerator": "h100"}}


def cq(name: str, nominal: int, *, cohort: str | None = None, borrowing: int | None = None,
       lending: int | None = None, within: PreemptionPolicy = PreemptionPolicy.NEVER,
       reclaim: PreemptionPolicy = PreemptionPolicy.NEVER,
       strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
       flavors: Mapping[str, int] | None = None) -> ClusterQueue:
    quotas = flavors or {"a100": nominal}
    return ClusterQueue(name=name, cohort=cohort, strategy=strategy, within=within, reclaim=reclaim, groups=(
        ResourceGroup(covered=(GPU,), flavors=tuple(
            FlavorQuotas(flavor=f, quotas={GPU: Quota(nominal=n, borrowing_limit=borrowing, lending_limit=lending)})
            for f, n in quotas.items())),))


def req(key: str, queue: str, gpus: int, *, priority: int = 0, t: float = 0.0,
        selector: Mapping[str, str] | None = None) -> Request:
    return Request(key=key, cq=queue, priority=priority, timestamp=t, requests={GPU: gpus, "cpu": 1000},
                   selector=selector or {})


def admit(book: QuotaBook, request: Request, now: float = 0.0) -> None:
    decision = book.decide(request)
    assert decision.admissible, decision.reason
    for target in decision.targets:
        book.remove(target.key)
    book.add(book.admission(decision, now))


def test_a_queue_without_a_cohort_admits_up_to_its_nominal_quota_all_or_nothing() -> None:
    book = QuotaBook([cq("team", 16)], LABELS)
    admit(book, req("a", "team", 8))
    admit(book, req("b", "team", 8))
    decision = book.decide(req("c", "team", 1))
    assert not decision.admissible
    assert "insufficient quota for nvidia.com/gpu in flavor a100: needs 1, 0 available" in decision.reason
    assert book.usage["team"] == {("a100", GPU): 16}
    book.remove("a")
    assert not book.decide(req("big", "team", 9)).admissible  # 8 free: a 9-GPU gang is not admitted in part
    assert book.decide(req("fits", "team", 8)).admissible


def test_resources_a_queue_does_not_cover_are_not_counted() -> None:
    book = QuotaBook([cq("team", 8)], LABELS)
    decision = book.decide(req("a", "team", 8))
    assert decision.assignment is not None and dict(decision.assignment.usage) == {("a100", GPU): 8}


def test_borrowing_in_a_cohort_up_to_the_borrowing_limit_and_the_lenders_lending_limit() -> None:
    book = QuotaBook([cq("vision", 16, cohort="research", borrowing=8),
                      cq("nlp", 16, cohort="research", lending=4)], LABELS)
    admit(book, req("v1", "vision", 16))
    assert not book.borrowing("vision")
    decision = book.decide(req("v2", "vision", 8))
    assert not decision.admissible  # nlp lends at most 4
    admit(book, req("v3", "vision", 4))
    assert book.admitted["v3"].borrowing and book.borrowing("vision")
    assert not book.decide(req("v4", "vision", 1)).admissible
    # nlp's guaranteed 12 GPUs are still there for it, the lent 4 are not
    assert book.decide(req("n1", "nlp", 12)).admissible
    assert book.decide(req("n2", "nlp", 13)).assignment is None


def test_borrowing_limit_caps_a_borrower_even_when_the_cohort_has_more() -> None:
    book = QuotaBook([cq("vision", 8, cohort="c", borrowing=4), cq("nlp", 32, cohort="c")], LABELS)
    assert book.decide(req("a", "vision", 12)).admissible
    assert not book.decide(req("b", "vision", 13)).admissible
    assert book.available("vision", ("a100", GPU)) == 12


def test_flavors_are_tried_in_order_and_skipped_when_the_node_selector_contradicts_them() -> None:
    book = QuotaBook([cq("team", 0, flavors={"a100": 8, "h100": 8})], LABELS)
    admit(book, req("a", "team", 8))
    decision = book.decide(req("b", "team", 8))
    assert decision.assignment is not None and decision.assignment.flavors == ("h100",)
    pinned = book.decide(req("c", "team", 1, selector={"accelerator": "a100"}))
    assert not pinned.admissible  # a100 is full and h100 is not what the pods select
    book2 = QuotaBook([cq("team", 0, flavors={"a100": 8, "h100": 8})], LABELS)
    choice = book2.decide(req("d", "team", 4, selector={"accelerator": "h100"}))
    assert choice.assignment is not None and choice.assignment.flavors == ("h100",)


def test_preemption_within_a_queue_takes_lower_priority_newest_first_and_no_more_than_needed() -> None:
    book = QuotaBook([cq("team", 16, within=PreemptionPolicy.LOWER_PRIORITY)], LABELS)
    admit(book, req("old-low", "team", 4, priority=0), now=1.0)
    admit(book, req("new-low", "team", 4, priority=0), now=2.0)
    admit(book, req("mid", "team", 8, priority=5), now=3.0)
    decision = book.decide(req("high", "team", 4, priority=10))
    assert decision.assignment is not None and decision.assignment.mode is Mode.PREEMPT
    assert [t.key for t in decision.targets] == ["new-low"]  # lowest priority first, then the newest admission
    bigger = book.decide(req("high8", "team", 8, priority=10))
    assert sorted(t.key for t in bigger.targets) == ["new-low", "old-low"]
    same = book.decide(req("peer", "team", 4, priority=0))
    assert not same.admissible  # LowerPriority never takes equal priority
    assert "nothing to preempt" in same.reason


def test_fill_back_keeps_targets_that_are_not_needed() -> None:
    book = QuotaBook([cq("team", 16, within=PreemptionPolicy.LOWER_PRIORITY)], LABELS)
    admit(book, req("big-low", "team", 12, priority=1), now=1.0)
    admit(book, req("small-lowest", "team", 4, priority=0), now=2.0)
    decision = book.decide(req("high", "team", 12, priority=10))
    # Greedy order takes small-lowest first, then big-low; once big-low is gone small-lowest may stay.
    assert [t.key for t in decision.targets] == ["big-low"]


def test_lower_or_newer_equal_priority_preempts_newer_workloads_of_equal_priority() -> None:
    book = QuotaBook([cq("team", 8, within=PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY)], LABELS)
    admit(book, req("newer", "team", 8, t=50.0))
    assert [t.key for t in book.decide(req("older", "team", 8, t=10.0)).targets] == ["newer"]
    assert not book.decide(req("newest", "team", 8, t=90.0)).admissible


def test_reclaim_within_cohort_preempts_only_borrowers_before_own_lower_priority_work() -> None:
    book = QuotaBook([cq("vision", 16, cohort="c", within=PreemptionPolicy.LOWER_PRIORITY,
                         reclaim=PreemptionPolicy.ANY),
                      cq("nlp", 16, cohort="c")], LABELS)
    admit(book, req("v-low", "vision", 8, priority=0), now=1.0)
    admit(book, req("n-own", "nlp", 16, priority=9), now=2.0)
    admit(book, req("n-borrow", "nlp", 8, priority=9), now=3.0)
    assert book.borrowing("nlp")
    decision = book.decide(req("v-high", "vision", 8, priority=5))
    assert [t.key for t in decision.targets] == ["n-borrow"]  # other queues' borrowed work first (Any priority)
    decision = book.decide(req("v-huge", "vision", 16, priority=5))
    assert [t.key for t in decision.targets] == ["n-borrow", "v-low"]
    assert "n-own" not in {t.key for t in decision.targets}  # nlp within its nominal quota is never reclaimed


def test_reclaim_lower_priority_spares_borrowers_of_higher_priority() -> None:
    book = QuotaBook([cq("vision", 8, cohort="c", reclaim=PreemptionPolicy.LOWER_PRIORITY),
                      cq("nlp", 8, cohort="c")], LABELS)
    admit(book, req("n1", "nlp", 16, priority=9))
    assert not book.decide(req("v", "vision", 8, priority=5)).admissible
    assert [t.key for t in book.decide(req("v", "vision", 8, priority=10)).targets] == ["n1"]


def test_queue_order_is_priority_then_timestamp() -> None:
    ordered = queue_order([req("late-high", "q", 1, priority=5, t=9.0), req("early", "q", 1, t=1.0),
                           req("late", "q", 1, t=5.0)])
    assert [r.key for r in ordered] == ["late-high", "early", "late"]


def test_best_effort_fifo_looks_past_a_head_that_does_not_fit_and_strict_fifo_does_not() -> None:
    for strategy, expected in ((QueueingStrategy.BEST_EFFORT_FIFO, "small"), (QueueingStrategy.STRICT_FIFO, None)):
        book = QuotaBook([cq("team", 8, strategy=strategy)], LABELS)
        admit(book, req("running", "team", 4))
        pending = {"team": queue_order([req("big", "team", 8, t=1.0), req("small", "team", 4, t=2.0)])}
        decision, reasons = next_decision(book, pending)
        assert (decision.request.key if decision else None) == expected
        assert "big" in reasons


def test_across_queues_the_cycle_takes_non_borrowing_heads_first() -> None:
    book = QuotaBook([cq("a", 8, cohort="c"), cq("b", 8, cohort="c")], LABELS)
    admit(book, req("a0", "a", 8))
    pending = {"a": [req("a-borrow", "a", 4, priority=9, t=0.0)], "b": [req("b-own", "b", 4, priority=0, t=5.0)]}
    decision, _ = next_decision(book, pending)
    assert decision is not None and decision.request.key == "b-own"


# ------------------------------------------------------------------------------------------------- state machine
QUEUES = [cq("x", 16, cohort="c", borrowing=8, lending=8, within=PreemptionPolicy.LOWER_PRIORITY,
             reclaim=PreemptionPolicy.ANY),
          cq("y", 8, cohort="c", within=PreemptionPolicy.LOWER_PRIORITY, reclaim=PreemptionPolicy.LOWER_PRIORITY),
          cq("z", 8, strategy=QueueingStrategy.STRICT_FIFO)]


class AdmissionMachine(RuleBasedStateMachine):
    """Workloads arrive, finish and get admitted through `next_decision`; the book must stay within every limit and
    every admission must hold a workload's whole request."""

    def __init__(self) -> None:
        super().__init__()
        self.book = QuotaBook(QUEUES, LABELS)
        self.pending: dict[str, Request] = {}
        self.requests: dict[str, Request] = {}
        self.seq = 0
        self.now = 0.0

    @rule(queue=st.sampled_from(["x", "y", "z"]), gpus=st.sampled_from([1, 2, 4, 8, 16]),
          priority=st.integers(0, 3))
    def arrive(self, queue: str, gpus: int, priority: int) -> None:
        self.seq += 1
        self.now += 1.0
        r = req(f"w{self.seq}", queue, gpus, priority=priority, t=self.now)
        self.pending[r.key] = r
        self.requests[r.key] = r

    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        if self.book.admitted:
            key = data.draw(st.sampled_from(sorted(self.book.admitted)))
            self.book.remove(key)

    @rule()
    def cycle(self) -> None:
        self.now += 1.0
        for _ in range(50):
            by_queue: dict[str, list[Request]] = {}
            for r in self.pending.values():
                by_queue.setdefault(r.cq, []).append(r)
            decision, _ = next_decision(self.book, {q: queue_order(rs) for q, rs in by_queue.items()})
            if decision is None:
                return
            for target in decision.targets:
                victim = self.requests[target.key]
                assert target.cq == victim.cq
                own = QUEUES[["x", "y", "z"].index(victim.cq)]
                if target.cq == decision.request.cq:
                    assert target.priority < decision.request.priority
                else:
                    assert own.cohort is not None and self.book.borrowing(target.cq)
                self.book.remove(target.key)
                self.pending[target.key] = victim
            self.book.add(self.book.admission(decision, self.now))
            del self.pending[decision.request.key]

    @invariant()
    def quotas_hold(self) -> None:
        pool = drawn = 0
        for q in QUEUES:
            used = self.book.usage[q.name].get(("a100", GPU), 0)
            quota = q.quota(("a100", GPU))
            assert used >= 0
            if q.cohort is None:
                assert used <= quota.nominal
            else:
                limit = quota.nominal + (quota.borrowing_limit if quota.borrowing_limit is not None else 10**9)
                assert used <= limit
                pool += quota.lendable
                drawn += max(0, used - (quota.nominal - quota.lendable))
        assert drawn <= pool

    @invariant()
    def admissions_are_whole(self) -> None:
        for key, admission in self.book.admitted.items():
            assert sum(admission.usage.values()) == self.requests[key].requests[GPU]
            assert key not in self.pending
        assert sum(sum(u.values()) for u in self.book.usage.values()) == sum(
            sum(a.usage.values()) for a in self.book.admitted.values())


AdmissionMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                              suppress_health_check=[HealthCheck.too_slow])
TestAdmissionMachine = AdmissionMachine.TestCase


@settings(max_examples=200, deadline=None)
@given(used=st.lists(st.integers(0, 40), min_size=3, max_size=3), nominal=st.lists(st.integers(0, 24), min_size=3,
                                                                                   max_size=3),
       lending=st.lists(st.one_of(st.none(), st.integers(0, 24)), min_size=3, max_size=3),
       borrowing=st.one_of(st.none(), st.integers(0, 16)))
def test_available_is_the_largest_amount_that_fits(used: list[int], nominal: list[int], lending: list[int | None],
                                                   borrowing: int | None) -> None:
    members = [cq(f"q{i}", n, cohort="c", lending=None if lend is None else min(lend, n),
                  borrowing=borrowing if i == 0 else None) for i, (n, lend) in enumerate(zip(nominal, lending,
                                                                                              strict=True))]
    book = QuotaBook(members, LABELS)
    for i, amount in enumerate(used):
        if amount:
            book.add(Admission(key=f"a{i}", cq=f"q{i}", priority=0, timestamp=0.0, admitted_s=0.0,
                               usage={("a100", GPU): amount}, flavors=("a100",), borrowing=False))
    room = book.available("q0", ("a100", GPU))
    assert room == 0 or book.fits("q0", {("a100", GPU): room})
    assert not book.fits("q0", {("a100", GPU): room + 1})
