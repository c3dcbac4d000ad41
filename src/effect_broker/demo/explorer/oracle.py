"""The explorer's oracle: the target's own rows against each class's promise and against
every answer the agents got.

Pure (no processes, no sockets), so the rules can be tested on made-up evidence. The
target's table of executions is the truth; the proxy's ledger is only consulted for
what it claims (a 2xx receipt) and for the unknowns it shows. The rules:

* at most one execution per operation key, whatever the class (idempotent,
  reconcilable and transactional by proof; unsafe because it is never resent);
* a 2xx answer claims that the operation executed: exactly one execution, and the
  answer names it (its charge id);
* every 2xx answer for one key equals the first (a replay is the same answer);
* ``outcome-unknown``, withheld and failed answers claim nothing either way;
* a 2xx receipt in the ledger claims an execution as well;
* unsafe operations the ledger shows ``outcome_unknown`` are reported, with whether
  the target executed them: that is the promise for that class, an honest unknown.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

SETTLED = frozenset({"succeeded", "failed_final"})


@dataclass(frozen=True)
class Answer:
    """One request of one agent: the HTTP answer, or ``error`` when none came."""

    key: str
    agent: int
    proxy: int
    started: float  # wall clock, like the target's rows
    finished: float
    status: int | None = None
    problem: str | None = None
    retry_after: float | None = None
    replayed: bool = False
    body: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def kind(self) -> str:
        if self.ok:
            return "2xx replayed" if self.replayed else "2xx"
        if self.status is None:
            return f"no answer ({self.error})"
        return f"{self.status} {self.problem}" if self.problem else str(self.status)

    @property
    def charge_id(self) -> str | None:
        try:
            document = json.loads(self.body or "")
        except ValueError:
            return None
        found = document.get("id") if isinstance(document, dict) else None
        return found if isinstance(found, str) else None

    def next_pause(self, retry_after_cap: float, pause: float) -> float | None:
        """How long before asking again; None when this answer is final."""
        if self.status is None or self.status >= 500:
            return pause
        if self.status in (409, 429) and self.retry_after is not None:
            return min(self.retry_after, retry_after_cap)
        return None  # a 2xx, another 4xx, or an outcome-unknown with no retry


@dataclass(frozen=True)
class Execution:
    """One row of the target's own table: a charge that really happened."""

    key: str
    charge_id: str
    created: float


@dataclass(frozen=True)
class LedgerRow:
    key: str
    status: str
    safety: str
    receipt_status: int | None
    at_rest: bool


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    stats: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        s = self.stats
        text = (
            f"ops {s['ops']}, requests {s['requests']}, 2xx {s['2xx']}, "
            f"executions {s['executions']}, duplicates {s['duplicates']}, "
            f"unsafe unknown {s['unsafe unknown']}"
        )
        if s["unsettled"]:  # a liveness note, not a broken promise
            text += f", still moving after the settle deadline {s['unsettled']}"
        return text


def judge(
    keys: Mapping[str, str],
    answers: Sequence[Answer],
    executions: Sequence[Execution],
    ledger: Mapping[str, LedgerRow],
) -> Verdict:
    """Every operation key (``keys``: key -> mode) against the truth."""
    verdict = Verdict()
    by_key: dict[str, list[Answer]] = defaultdict(list)
    for answer in sorted(answers, key=lambda a: a.finished):
        by_key[answer.key].append(answer)
    done: dict[str, list[Execution]] = defaultdict(list)
    for execution in executions:
        done[execution.key].append(execution)
    stranger = sorted(set(done) - set(keys))
    if stranger:
        verdict.violations.append(f"executions for keys no agent asked for: {stranger}")
    verdict.stats.update(
        ops=len(keys),
        requests=len(answers),
        executions=len(executions),
        **{"2xx": sum(a.ok for a in answers)},
    )
    for key, mode in sorted(keys.items()):
        _judge_key(verdict, key, mode, by_key[key], done[key], ledger.get(key))
    return verdict


def _judge_key(
    verdict: Verdict,
    key: str,
    mode: str,
    answers: Sequence[Answer],
    executions: Sequence[Execution],
    row: LedgerRow | None,
) -> None:
    say = verdict.violations.append
    n = len(executions)
    if n > 1:
        verdict.stats["duplicates"] += 1
        say(f"{key} ({mode}): {n} executions at the target, at most one is promised")
    answered = [a for a in answers if a.ok]
    if answered:
        first = answered[0]
        ids = sorted(e.charge_id for e in executions)
        if n == 0:
            say(f"{key} ({mode}): answered 2xx, but the target never executed it")
        elif first.charge_id not in ids:
            say(
                f"{key} ({mode}): answered 2xx naming {first.charge_id}, but the target "
                f"executed {ids}"
            )
        for later in answered[1:]:
            if later.body != first.body or later.status != first.status:
                say(
                    f"{key} ({mode}): a later 2xx ({later.status} {later.body!r}) is "
                    f"not the first ({first.status} {first.body!r})"
                )
                break
    receipt = row.receipt_status if row is not None else None
    if receipt is not None and 200 <= receipt < 300 and n == 0:
        say(f"{key} ({mode}): the ledger holds a 2xx receipt, the target no execution")
    if row is not None and not row.at_rest:
        verdict.warnings.append(f"{key} ({mode}): still {row.status} after the round")
        verdict.stats["unsettled"] += 1
    if mode == "unsafe" and row is not None and row.status == "outcome_unknown":
        verdict.stats["unsafe unknown"] += 1
        verdict.stats["unsafe unknown, executed"] += n
    if not answers or answers[-1].next_pause(1.0, 0.1) is not None:
        verdict.stats["no final answer"] += 1
