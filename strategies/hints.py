"""A rough model of the queues that the generator keeps while it draws, to choose arguments that
matter: the ids a worker holds and their tokens, the dead ids, the next deadline.

It is a hint, not an oracle: corruption, restarts and interleavings make it drift, and that is
fine; the executors and the contract decide what happened, never this.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class QueueHints:
    pending: dict[bytes, int] = field(default_factory=dict)
    delayed: dict[bytes, int] = field(default_factory=dict)
    active: dict[bytes, int] = field(default_factory=dict)
    dead: set[bytes] = field(default_factory=set)
    done: set[bytes] = field(default_factory=set)
    attempts: dict[bytes, int] = field(default_factory=dict)
    stalled: dict[bytes, int] = field(default_factory=dict)
    rows: set[bytes] = field(default_factory=set)
    broken: set[bytes] = field(default_factory=set)  # the queue's sets a corruption made wrong-typed
    paused: bool = False

    def enqueue(self, job: bytes, now: int, delay: int) -> None:
        if job in self.rows:
            return
        self.rows.add(job)
        if delay == 0:
            self.pending[job] = now
        else:
            self.delayed[job] = now + delay

    def head(self) -> bytes:
        """The pending id the next CLAIM takes (lowest score, then lowest id)."""
        return min(self.pending, key=lambda j: (self.pending[j], j))

    def first_to_expire(self) -> bytes:
        """The active id whose lease ends first: the one a SWEEP selects first."""
        return min(self.active, key=lambda j: (self.active[j], j))

    def claim(self, now: int, lease: int) -> None:
        if self.paused or not self.pending:
            return
        job = self.head()
        del self.pending[job]
        if job in self.rows:
            self.attempts[job] = self.attempts.get(job, 0) + 1
            self.active[job] = now + lease

    def claim_many(self, now: int, lease: int, count: int) -> None:
        """`count` CLAIMs back to back (a bulk step): the queue ordered once, not once a call."""
        if self.paused or not self.pending:
            return
        for job in sorted(self.pending, key=lambda j: (self.pending[j], j))[:count]:
            del self.pending[job]
            if job in self.rows:
                self.attempts[job] = self.attempts.get(job, 0) + 1
                self.active[job] = now + lease

    def fenced(self, job: bytes, token: int) -> bool:
        return job in self.active and self.attempts.get(job) == token

    def extend(self, job: bytes, token: int, now: int, lease: int) -> None:
        if self.fenced(job, token):
            self.active[job] = now + lease

    def complete(self, job: bytes, token: int) -> None:
        if self.fenced(job, token):
            del self.active[job]
            self.done.add(job)

    def fail(self, job: bytes, token: int, max_attempts: int, now: int, backoff: int) -> None:
        if self.fenced(job, token):
            del self.active[job]
            if token >= max_attempts:
                self.dead.add(job)
            else:
                self.delayed[job] = now + backoff

    def promote(self, now: int, limit: int) -> None:
        due = sorted((t, j) for j, t in self.delayed.items() if t <= now)[:limit]
        for due_at, job in due:
            del self.delayed[job]
            if job in self.rows:
                self.pending[job] = due_at

    def sweep(self, now: int, max_stalled: int, limit: int) -> None:
        expired = sorted((t, j) for j, t in self.active.items() if t <= now)[:limit]
        for _, job in expired:
            del self.active[job]
            stalled = self.stalled.get(job, 0) + 1
            self.stalled[job] = stalled
            if stalled >= max_stalled:
                self.dead.add(job)
            else:
                self.pending[job] = 0

    def revive(self, job: bytes, now: int) -> None:
        if job in self.dead:
            self.dead.discard(job)
            self.pending[job] = now
            self.stalled[job] = 0

    def deadlines(self) -> list[int]:
        return sorted([*self.active.values(), *self.delayed.values()])
