"""Time-ordered 64-bit ids, unique across processes: 41 bits of ms, 10 of node, 12 of sequence."""

from __future__ import annotations

import os
import secrets
import threading
import time

EPOCH_MS = 1_577_836_800_000  # 2020-01-01T00:00:00Z; 41 bits of ms last until 2089.
_NODE_BITS = 10
_SEQ_BITS = 12
_MAX_SEQ = (1 << _SEQ_BITS) - 1


class IdGenerator:
    # Until `use_node` (a lease, kernel/node_lease.py) the node is drawn at random: fine for a
    # test or a one-off command; a serving process always leases its node.
    valid_until_ms: int | None = None

    def __init__(self, node_id: int | None = None) -> None:
        # Without a configured node id every process draws one, so two workers rarely share it;
        # the primary keys are unique in the database, so a clash fails loudly, never silently.
        self.node_id = node_id if node_id is not None else secrets.randbelow(1 << _NODE_BITS)
        if not 0 <= self.node_id < 1 << _NODE_BITS:  # wider ones would spill into the time bits
            raise ValueError(f"node id must be in 0..{(1 << _NODE_BITS) - 1}, not {self.node_id}")
        self._lock = threading.Lock()
        self._last_ms = 0
        self._seq = 0

    def use_node(self, node_id: int, valid_until_ms: int | None) -> None:
        with self._lock:
            self.node_id = node_id
            self.valid_until_ms = valid_until_ms

    def next_int(self) -> int:
        with self._lock:
            now = int(time.time() * 1000)
            if self.valid_until_ms is not None and now >= self.valid_until_ms:
                # The lease ran out unrenewed: another process may hold this node now.
                raise RuntimeError(f"the lease of id node {self.node_id} has expired")
            if now < self._last_ms:  # wall clock stepped back: keep ordering by reusing last ms
                now = self._last_ms
            if now == self._last_ms:
                self._seq = (self._seq + 1) & _MAX_SEQ
                if self._seq == 0:  # this ms is spent: borrow the next one rather than wait for
                    now = self._last_ms + 1  # a clock that may have stepped back a long way
            else:
                self._seq = 0
            self._last_ms = now
            return (
                ((now - EPOCH_MS) << (_NODE_BITS + _SEQ_BITS))
                | (self.node_id << _SEQ_BITS)
                | self._seq
            )

    def next(self) -> str:
        return str(self.next_int())


_default = IdGenerator(
    int(os.environ["MULTIBANK_NODE_ID"]) if "MULTIBANK_NODE_ID" in os.environ else None
)


def new_id() -> int:
    return _default.next_int()


def use_node(node_id: int, valid_until_ms: int | None) -> None:
    """This process's ids use `node_id` (leased until `valid_until_ms`), unless the operator
    fixed one with MULTIBANK_NODE_ID."""
    if "MULTIBANK_NODE_ID" not in os.environ:
        _default.use_node(node_id, valid_until_ms)


def end_lease() -> None:
    """The lease was released: another process may take the node at once, so stop using it and
    go back to a random node, as before any lease (a one-off command, a test)."""
    if "MULTIBANK_NODE_ID" not in os.environ:
        _default.use_node(secrets.randbelow(1 << _NODE_BITS), None)


def current_node() -> int:
    return _default.node_id
