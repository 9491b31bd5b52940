"""What the router workers ask of the control plane over the management listener: the table to route by, a key's
admission against its limits (control/tenants/limit_counters.py), and their activity and usage reported."""

from __future__ import annotations

from aiohttp import web
from pydantic import ValidationError

from llmgw.api.router import ActivityReport as Report
from llmgw.api.router import Admission, AdmitRequest, RouterView
from llmgw.control.http.keys_api import BadRequest, js
from llmgw.control.http.local_state import RouterSide
from llmgw.control.nodes.ready_times import longest_by_model
from llmgw.core.errors import StoreError
from llmgw.records.state import not_answering


class RouterRoutes(RouterSide):
    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/router/view", self.view),
            web.post("/api/router/activity", self.report),
            web.post("/api/router/admit", self.admit),
        ]

    async def view(self, _: web.Request) -> web.Response:
        reg = self.registry
        view = RouterView(
            generation=reg.generation,
            keys_version=self.credentials.keys_version,
            models=list(reg.models.values()),
            ready=reg.ready_table(),
            loads=self.activity.engine_loads,
            not_answering=not_answering(reg.replicas.values()),
            stale_for=self.storage.stale_for(),
            ready_seconds=longest_by_model(self.ready_times()) if self.ready_times is not None else {},
        )
        return web.Response(text=view.model_dump_json(), content_type="application/json")

    async def admit(self, request: web.Request) -> web.Response:
        """A router worker's request to admit one request of a key against its limits
        (control/tenants/limit_counters.py)."""
        try:
            ask = AdmitRequest.model_validate_json(await request.read())
        except (ValidationError, RecursionError) as e:
            raise BadRequest(f"admission: {str(e).splitlines()[0]}") from None
        try:
            key = await self.credentials.key_record(ask.key_id)
        except StoreError as e:  # a key made elsewhere, while keys cannot be read: neither admitted nor called invalid
            answer = Admission(admitted=False, refusal="limits_unavailable", retry_after=1.0, message=str(e))
            return web.Response(text=answer.model_dump_json(), content_type="application/json")
        if key is None or key.revoked_at is not None:
            answer = Admission(admitted=False, refusal="invalid_api_key", message="invalid or revoked API key")
        else:
            answer = self.limit_counters.admission(key, ask.cost, ask.ticket, ask.model)
        return web.Response(text=answer.model_dump_json(), content_type="application/json")

    async def report(self, request: web.Request) -> web.Response:
        try:
            act = Report.model_validate_json(await request.read())
        except (ValidationError, RecursionError) as e:
            raise BadRequest(f"activity report: {str(e).splitlines()[0]}") from None
        self.activity.record_activity(act)
        try:
            added = await self.activity.record_usage(act.usage)
        except StoreError as e:  # the worker keeps the batch and sends it again; ids make that harmless
            return js({"error": f"usage not recorded: {e}"}, 503)
        return js({"ok": True, "recorded": added})

