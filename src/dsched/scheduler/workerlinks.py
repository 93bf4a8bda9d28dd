"""The scheduler shell's connections to its workers, and the rules of what goes on them.

A worker's connection is its own from its register op until it ends, or until the worker
registers again on another (the newer wins). A connection hears nothing before its
Registered; an op decided for an earlier connection of the worker is not sent on the one that
replaced it (the registration has made the state reconcile what it was about); a
registration's answer, Registered or a refusal, goes to the connection it came on. What is
written to workers goes at the end of the loop's turn, or at once when the group commit says
so (``flush``): the attempts it sends ahead, and its Proceeds once it is committed.

No decisions: the state makes them; this only says which connection carries them.
"""

from __future__ import annotations

import collections

from ..comm import Comm


class WorkerLinks:
    """``workers``: each registered worker's connection, by address."""

    def __init__(self) -> None:
        self.workers: dict[str, Comm] = {}
        #: The connections that have been told Registered: only those hear more.
        self._greeted: set[Comm] = set()
        #: By address, in order, the connections whose registration awaits its answer (a
        #: Registered, or a refusal): each answer is for the first, whatever came since.
        self._registering: dict[str, collections.deque] = {}
        #: The connections written to since the last ``flush``.
        self._to_flush: set[Comm] = set()

    def register(self, address: str, comm: Comm) -> Comm | None:
        """``comm`` brought the register op of ``address``: the worker's connection from now
        on; the one it replaces, if any (the worker reconnected before that one was seen to
        close)."""
        old = self.workers.pop(address, None)
        self.workers[address] = comm
        self._registering.setdefault(address, collections.deque()).append(comm)
        return old

    def ended(self, address: str, comm: Comm) -> bool:
        """``comm``, of ``address``, has ended: whether it was still the worker's connection
        (then the worker has left)."""
        self._greeted.discard(comm)
        self._to_flush.discard(comm)
        if self.workers.get(address) is not comm:
            return False
        del self.workers[address]
        return True

    def send(self, address: str, wire: dict, accepted: bool = False, bulk: bool = False) -> None:
        """Write the op ``wire`` to the worker at ``address``, on the connection it is for;
        ``accepted``: it is the answer Registered (to the connection its registration came
        on, which from then on hears the rest); ``bulk``: see ``Comm.write_nowait``."""
        comm = self.workers.get(address)
        if accepted:
            if self.answering(address) is not comm:
                return  # gone since, replaced by one that registered again
            self._greeted.add(comm)
        elif comm not in self._greeted:  # decided for an earlier connection: the
            return  # registration on this one has made the state forget it
        if comm is not None and not comm.closed:  # else its WorkerLeft is on the way
            comm.write_nowait(wire, bulk=bulk)
            self._to_flush.add(comm)

    def flush(self) -> None:
        """Send whatever was written to workers since the last flush now, not after the
        loop's turn, each worker's in one message. The group commit calls it once the held
        attempts a commit starts are written (the workers prepare them while the commit's
        thread writes), and once the commit's Proceeds and acknowledgements are (before what
        clients are told is made)."""
        for comm in self._to_flush:
            comm.flush_now()
        self._to_flush.clear()

    def refuse(self, address: str, reason: str) -> None:
        """Close the connection the next answer to ``address``'s registration is for, saying
        why: it is listening, and will not come back."""
        comm = self.answering(address)
        if comm is not None:
            comm.close_nowait(f"refused: {reason}")

    def cut(self, address: str, reason: str) -> None:
        """Abort the worker's connection, which stopped answering; not one that registered
        again since and has not heard Registered yet."""
        comm = self.workers.get(address)
        if comm in self._greeted:
            comm.abort(reason)

    def answering(self, address: str) -> Comm | None:
        """The connection the next answer to a registration from ``address`` is for."""
        waiting = self._registering.get(address)
        if not waiting:
            return None
        comm = waiting.popleft()
        if not waiting:
            del self._registering[address]
        return comm
