"""ConductorScheduler: vLLM's scheduler, plus background turns that yield to clients.

Runs inside vLLM's engine-core process (plugged in as `scheduler_cls`). Three rules on top
of vLLM's priority scheduling:

* A client request waiting means every running background request is ended at this step,
  with status aborted, and its final output is emitted (else its caller would wait
  forever). Its KV blocks go back to the pool as cached blocks, so the conversation's
  prefix stays in the prefix cache.
* While any client request is waiting or running, waiting background requests are held
  back: a background turn never starts beside a client.
* A client's request that can wait (a background response, `DEFERRED_PRIORITY`) is never
  ended, since its output is an answer someone reads: vLLM's priority queue admits an
  interactive request before it, and when an interactive request waits with every slot
  taken, a running deferred request is preempted (vLLM's own preemption: its blocks go
  back as cached blocks, it waits again and resumes with its output kept, its prefix
  mostly read from the cache). One user's queue of background responses cannot hold up
  another user's chat for more than a step.
"""

from __future__ import annotations

import time

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs
from vllm.v1.request import Request, RequestStatus

from engine.request_kind import CLIENT_PRIORITY, kind_of


def is_background(request: Request) -> bool:
    params = request.sampling_params
    return params is not None and kind_of(params.extra_args) == "background"


class ConductorScheduler(Scheduler):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._ended_background: list[Request] = []

    def schedule(self, *args, **kwargs) -> SchedulerOutput:
        client_waiting = any(not is_background(r) for r in self.waiting)
        if client_waiting:
            self._end_running_background()
            self._preempt_deferred_for_interactive()
        client_present = client_waiting or any(not is_background(r) for r in self.running)
        held = [r for r in self.waiting if is_background(r)] if client_present else []
        if held:
            self.waiting.remove_requests(held)
        try:
            return super().schedule(*args, **kwargs)
        finally:
            for request in held:
                self.waiting.add_request(request)

    def update_from_output(self, scheduler_output, model_runner_output):
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        self._emit_ended_background(outputs)
        return outputs

    def _end_running_background(self) -> None:
        victims = [r.request_id for r in self.running if is_background(r)]
        if victims:
            self._ended_background.extend(
                self.finish_requests(victims, RequestStatus.FINISHED_ABORTED)
            )

    def _preempt_deferred_for_interactive(self) -> None:
        """A slot for each waiting interactive request, taken from running deferred ones
        (the lowest priority, the newest first) while there are no free slots."""
        interactive = sum(1 for r in self.waiting
                          if not is_background(r) and r.priority <= CLIENT_PRIORITY)
        # (a paused streaming session holds a slot outside `running`, as vLLM counts it)
        taken = len(self.running) + self.num_waiting_for_streaming_input
        short = interactive - (self.max_num_active_reqs - taken)
        if short <= 0:
            return
        deferred = sorted((r for r in self.running
                           if not is_background(r) and r.priority > CLIENT_PRIORITY),
                          key=lambda r: (r.priority, r.arrival_time), reverse=True)
        now = time.monotonic()
        for request in deferred[:short]:
            if not self._request_blocks_can_be_freed(request):
                continue
            self.running.remove(request)
            self._preempt_request(request, now)  # back to the waiting queue, output kept

    def _emit_ended_background(self, outputs: dict[int, EngineCoreOutputs]) -> None:
        for request in self._ended_background:
            final = EngineCoreOutput(
                request_id=request.request_id,
                new_token_ids=[],
                finish_reason=request.get_finished_reason(),
                events=request.take_events(),
                trace_headers=request.trace_headers,
            )
            batch = outputs.get(request.client_index)
            if batch is None:
                outputs[request.client_index] = EngineCoreOutputs(outputs=[final])
            else:
                batch.outputs.append(final)
        self._ended_background.clear()
