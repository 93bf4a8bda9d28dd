"""The results a worker holds, and how they travel: served on the worker's data port to peer
workers and clients, and fetched from peers as the inputs of tasks here.

The same port serves the logs of the worker's job attempts (GetLog, answered by the job runner).
Which results to keep is ``WorkerState``'s decision; this module stores the values and moves
bytes. A result that cannot be pickled, or that is too large for one message, is answered
with an error that says so, and results that together outgrow a message go in several.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from .. import serialize
from ..comm import Comm
from ..errors import CommClosedError, LocalProtocolError, RemoteProtocolError, cannot_send_result
from ..peers import PeerPool
from ..protocol import Payload, ops
from ..settings import CommConfig
from .events import DependencyFetched, DependencyFetchFailed

logger = logging.getLogger("dsched.worker")


class ResultStore:
    """``values`` by key: the results computed here and the inputs fetched for tasks here.
    ``logs`` answers a GetLog."""

    def __init__(self, peers: PeerPool, comm: CommConfig,
                 logs: Callable[[ops.GetLog], Awaitable[ops.Log]] | None = None):
        self.values: dict[str, Any] = {}
        self.peers = peers
        self.comm = comm
        self.logs = logs

    # -- serving ------------------------------------------------------------------------------

    async def serve(self, comm: Comm) -> None:
        """Answer one peer's GetData and GetLog requests until it goes; any other op ends the
        connection."""
        try:
            async for d in comm:
                request = ops.decode(d)
                if type(request) is ops.GetData:
                    await self._answer(comm, request)
                elif type(request) is ops.GetLog and self.logs is not None:
                    await comm.send((await self.logs(request)).to_wire())
                else:
                    raise ops.BadOp(f"{request.OP} is not an op a worker's data port takes")
        except CommClosedError:
            pass
        except RemoteProtocolError as error:
            comm.protocol_error(error)

    async def _answer(self, comm: Comm, request: ops.GetData) -> None:
        data, missing, errors = {}, [], {}
        for key in request.keys:
            if key not in self.values:
                missing.append(key)
                continue
            try:
                data[key] = Payload(serialize.dumps(self.values[key]))
            except Exception as error:  # a result that cannot be pickled: say so
                errors[key] = cannot_send_result(key, error)
        # Awaited, not queued: the next request is served once the peer has taken this
        # reply, so large replies never pile up in the outbox.
        await self._send(comm, ops.Data(id=request.id, data=data, missing=tuple(missing),
                                        errors=errors))

    async def _send(self, comm: Comm, reply: ops.Data) -> None:
        """One reply; results that together outgrow one message go in several (all but the
        last marked ``more``), and one that alone does gets an error naming the limit."""
        try:
            await comm.send(reply.to_wire())  # encodes first: nothing is written when it raises
            return
        except LocalProtocolError as error:
            if len(reply.data) <= 1:
                errors = {**reply.errors, **{key: cannot_send_result(key, str(error))
                                              for key in reply.data}}
                await comm.send(ops.Data(id=reply.id, missing=reply.missing,
                                         errors=errors).to_wire())
                return
        keys = list(reply.data)
        half = len(keys) // 2
        await self._send(comm, ops.Data(id=reply.id, data={k: reply.data[k] for k in keys[:half]},
                                        more=True))
        await self._send(comm, ops.Data(id=reply.id, data={k: reply.data[k] for k in keys[half:]},
                                        missing=reply.missing, errors=reply.errors,
                                        more=reply.more))

    # -- fetching -----------------------------------------------------------------------------

    async def fetch(self, key: str, worker: str,
                    nbytes: int) -> DependencyFetched | DependencyFetchFailed:
        """Fetch ``key`` from ``worker`` and keep it; what happened, as an event."""
        try:
            reply = await self.peers.get_data(worker, (key,),
                                              timeout=self.comm.transfer_timeout_for(nbytes))
        except Exception as error:  # the peer is gone or slow: try another holder
            return DependencyFetchFailed(key, worker, str(error))
        payload = reply.data.get(key)
        cannot_send = reply.errors.get(key)
        if payload is None:
            return DependencyFetchFailed(key, worker, cannot_send or f"{worker} does not hold it",
                                         permanent=bool(cannot_send))
        try:
            value = serialize.loads(payload)
        except Exception as error:  # it will not unpickle here, whoever sends it
            return DependencyFetchFailed(key, worker, f"cannot unpickle it here: {error!r}",
                                         permanent=True)
        self.values[key] = value
        return DependencyFetched(key, serialize.sizeof(value), worker)
