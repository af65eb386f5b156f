"""Deferred single requests through the unmodified OpenAI SDK on the session's local stack.

Background Responses: create → queued → completed with its output, charged once at the
batch price; a cancel while its call is slow; another tenant's id; what background may not
be combined with; a background response is not a batch to the batch routes. The flex tier:
each route answers with ``service_tier: "flex"``, charged once at the batch price (its 429
and its place ahead of batches: ``test_operator``)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from local.run import LocalStack
from tests.e2e.conftest import Account, root
from tests.support import wait_for

pytestmark = pytest.mark.e2e
SETTLED = ("completed", "failed", "cancelled", "incomplete")


def sdk(stack: LocalStack, key: str) -> OpenAI:
    return OpenAI(base_url=stack.api_url, api_key=key, max_retries=0)


def ended(client: OpenAI, response_id: str, timeout: float = 60) -> Any:
    return wait_for(
        lambda: (r := client.responses.retrieve(response_id)).status in SETTLED and r,
        timeout=timeout,
        interval=0.1,
        what=f"{response_id} to end",
    )


def batch_cost(http: httpx.Client, model: str, usage: Any) -> float:
    """What ``usage`` costs at ``model``'s batch price, in USD."""
    pricing = http.get(f"/models/{model}").raise_for_status().json()["pricing"]["batch"]
    return (
        float(
            usage.input_tokens * pricing["input_per_mtok"] + usage.output_tokens * pricing["output_per_mtok"]
        )
        / 1e6
    )


def logged_sources(stack: LocalStack, batch_id: str) -> list[str]:
    """The sources the administrators' request log gives the calls of ``batch_id``."""
    log = root(stack, "sk-local-admin").get(
        "/admin/requests", params={"source": "batch", "batch_id": batch_id}
    )
    return [entry["source"] for entry in log.raise_for_status().json()["data"]]


def key_of(user: Account) -> str:
    return str(user.api.http.headers["Authorization"]).removeprefix("Bearer ")


def in_flight(stack: LocalStack, model: str) -> int:
    stats = httpx.get(f"{stack.sim_url}/_sim/stats", timeout=10).raise_for_status().json()
    return int(stats["models"].get(model, {}).get("in_flight", 0))


def spent(user: Account) -> float:
    return float(user.api.http.get("/me").raise_for_status().json()["spend_today_usd"])


def summed(user: Account) -> dict[str, Any]:
    """The administrators' cost figures for ``user`` (``GET /admin/batch/summary``)."""
    summary = user.admin.get("/admin/batch/summary", params={"user": user.id}).raise_for_status().json()
    (row,) = summary["users"]
    return dict(row)


def test_a_background_response_is_queued_then_completed_with_its_output_charged_once_at_the_batch_price(
    stack: LocalStack,
) -> None:
    user = Account(stack)
    client = sdk(stack, key_of(user))
    created = client.responses.create(
        model="sim-chat", input="hello from the background", background=True, metadata={"run": "1"}
    )
    assert created.id.startswith("resp_") and created.object == "response"
    assert created.status in ("queued", "in_progress") and created.background is True
    assert created.model == "sim-chat" and created.metadata == {"run": "1"}

    done = ended(client, created.id)
    assert done.status == "completed" and done.id == created.id and done.background is True
    assert done.output_text == "echo: hello from the background"
    assert done.usage is not None and done.usage.output_tokens > 0
    cost = batch_cost(user.api.http, "sim-chat", done.usage)
    # An owner without limits is charged as the batch's charges roll up (by its end at last).
    wait_for(lambda: spent(user) >= cost - 1e-12, timeout=30, what="the charge")
    assert spent(user) == pytest.approx(cost, abs=1e-9)
    assert logged_sources(stack, created.id) == ["background"]
    # ...and it is in the administrators' cost figures beside the user's batches
    figures = summed(user)
    assert figures["requests"]["succeeded"] == 1 and figures["cost_usd"] == pytest.approx(cost, abs=1e-9)


def test_a_model_that_does_not_serve_responses_is_refused_as_a_batch_refuses_it(stack: LocalStack) -> None:
    client = sdk(stack, "sk-local-alice")
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="sim-chat-only", input="chat only", background=True)
    assert refused.value.param == "model" and refused.value.code == "model_unsupported"
    assert "does not serve /v1/responses" in refused.value.message


def test_a_response_cancelled_while_its_call_is_slow_ends_cancelled_charged_at_most_once(
    stack: LocalStack,
) -> None:
    prompt = "[[sim latency_ms=2000]] slow"  # within the stack's upstream timeout (3 s)
    # What the call costs: the same text answered on the interactive path (the same tokens).
    usage = sdk(stack, "sk-local-alice").responses.create(model="sim-chat", input=prompt).usage
    user = Account(stack)
    client = sdk(stack, key_of(user))
    cost = batch_cost(user.api.http, "sim-chat", usage)
    slow = client.responses.create(model="sim-chat", input=prompt, background=True)
    wait_for(
        lambda: client.responses.retrieve(slow.id).status == "in_progress" and in_flight(stack, "sim-chat"),
        timeout=30,
        what="the slow call to start",
    )
    assert client.responses.cancel(slow.id).status == "cancelled"
    assert client.responses.cancel(slow.id).status == "cancelled"  # again: the same
    wait_for(lambda: in_flight(stack, "sim-chat") == 0, timeout=30, what="the slow call to answer")
    wait_for(lambda: spent(user) > 0, timeout=30, what="the call's charge")
    assert spent(user) == pytest.approx(cost, abs=1e-9)  # the call that ran, once
    after = client.responses.retrieve(slow.id)
    assert after.status == "cancelled" and after.output == []  # its answer is not shown


def test_cancelling_a_completed_response_answers_it_unchanged_and_delete_removes_it(
    stack: LocalStack,
) -> None:
    client = sdk(stack, "sk-local-alice")
    done = ended(client, client.responses.create(model="sim-chat", input="keep me", background=True).id)
    again = client.responses.cancel(done.id)
    assert again.status == "completed" and again.output_text == "echo: keep me"
    alice = httpx.Client(
        base_url=stack.api_url, headers={"Authorization": "Bearer sk-local-alice"}, timeout=10
    )
    deleted = wait_for(  # a 409 with Retry-After while its worker lets go of it
        lambda: (answer := alice.delete(f"/responses/{done.id}")).status_code != 409 and answer,
        timeout=30,
        what="the delete",
    )
    assert deleted.json() == {"id": done.id, "object": "response.deleted", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(done.id)


def test_a_queued_response_cannot_be_deleted_until_it_ends(stack: LocalStack) -> None:
    client = sdk(stack, "sk-local-alice")
    slow = client.responses.create(model="sim-chat", input="[[sim latency_ms=2000]] wait", background=True)
    with pytest.raises(openai.ConflictError) as refused:
        client.responses.delete(slow.id)
    assert refused.value.code == "response_not_finished"
    ended(client, slow.id)
    sdk(stack, "sk-local-alice").with_options(max_retries=5).responses.delete(
        slow.id
    )  # 409s while it lets go
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(slow.id)


def test_another_tenant_reads_cancels_and_deletes_nothing_of_a_users_response(stack: LocalStack) -> None:
    alice, bob = sdk(stack, "sk-local-alice"), sdk(stack, "sk-local-bob")
    mine = alice.responses.create(model="sim-chat", input="alice's own", background=True)
    for attempt in (
        lambda: bob.responses.retrieve(mine.id),
        lambda: bob.responses.cancel(mine.id),
        lambda: bob.responses.delete(mine.id),
    ):
        with pytest.raises(openai.NotFoundError) as refused:
            attempt()
        assert refused.value.code == "response_not_found"
    assert ended(alice, mine.id).output_text == "echo: alice's own"


def test_background_refuses_stream_and_store_false_and_an_invalid_body_storing_nothing(
    stack: LocalStack,
) -> None:
    user = Account(stack)
    client = sdk(stack, key_of(user))
    for extra, param in (({"stream": True}, "stream"), ({"store": False}, "store")):
        with pytest.raises(openai.BadRequestError) as refused:
            client.post(
                "/responses",
                body={"model": "sim-chat", "input": "x", "background": True, **extra},
                cast_to=dict,
            )
        assert refused.value.param == param
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="no-such-model", input="x", background=True)
    assert refused.value.param == "model"
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="sim-chat", input="x", background=True, previous_response_id="resp_1")
    assert refused.value.param == "previous_response_id"
    assert user.api.http.get("/me").json()["stored_input_bytes"] == 0


def test_a_background_response_is_no_batch_to_the_batch_routes_nor_in_their_list(stack: LocalStack) -> None:
    user = Account(stack)
    client = sdk(stack, key_of(user))
    made = client.responses.create(model="sim-chat", input="not a batch", background=True)
    assert client.batches.list().data == []
    for call in (lambda: client.batches.retrieve(made.id), lambda: client.batches.cancel(made.id)):
        with pytest.raises(openai.NotFoundError):
            call()
    assert ended(client, made.id).status == "completed"
    assert client.batches.list().data == []


def test_a_create_retried_with_its_idempotency_key_answers_the_first_response(stack: LocalStack) -> None:
    client = sdk(stack, "sk-local-alice")
    body = {"model": "sim-chat", "input": "once", "background": True}
    headers = {"Idempotency-Key": f"bg-{time.time_ns()}"}
    first = client.post("/responses", body=body, cast_to=dict, options={"headers": headers})
    again = client.post("/responses", body=body, cast_to=dict, options={"headers": headers})
    assert first["id"] == again["id"] and first["id"].startswith("resp_")
    assert ended(client, first["id"]).output_text == "echo: once"


def test_a_flex_request_on_each_route_answers_with_service_tier_flex_charged_once_at_the_batch_price(
    stack: LocalStack,
) -> None:
    user = Account(stack)
    client = sdk(stack, key_of(user))
    chat = client.chat.completions.create(
        model="sim-chat", messages=[{"role": "user", "content": "flex chat"}], service_tier="flex"
    )
    assert chat.service_tier == "flex" and chat.choices[0].message.content == "echo: flex chat"
    response = client.responses.create(model="sim-chat", input="flex response", service_tier="flex")
    assert response.service_tier == "flex" and response.output_text == "echo: flex response"
    embedded = client.embeddings.create(
        model="sim-embed", input="flex embedding", extra_body={"service_tier": "flex"}
    )
    assert len(embedded.data) == 1
    assert chat.usage is not None and response.usage is not None and embedded.usage is not None
    cost = batch_cost(
        user.api.http, "sim-chat", _Usage(chat.usage.prompt_tokens, chat.usage.completion_tokens)
    )
    cost += batch_cost(user.api.http, "sim-chat", response.usage)
    cost += batch_cost(user.api.http, "sim-embed", _Usage(embedded.usage.prompt_tokens, 0))
    wait_for(lambda: spent(user) >= cost - 1e-12, timeout=30, what="the charges")
    assert spent(user) == pytest.approx(cost, abs=1e-9)
    assert client.batches.list().data == []  # nor is a flex request a batch
    figures = summed(user)  # but each is in the administrators' cost figures
    assert figures["requests"]["succeeded"] == 3 and figures["cost_usd"] == pytest.approx(cost, abs=1e-9)


def test_a_flex_request_refuses_stream_and_an_invalid_body_before_anything_runs(stack: LocalStack) -> None:
    client = sdk(stack, "sk-local-alice")
    with pytest.raises(openai.BadRequestError) as refused:
        client.post(
            "/chat/completions",
            body={
                "model": "sim-chat",
                "messages": [{"role": "user", "content": "x"}],
                "service_tier": "flex",
                "stream": True,
            },
            cast_to=dict,
        )
    assert refused.value.param == "stream"
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "x"}], service_tier="flex"
        )
    assert refused.value.param == "model"


class _Usage:
    def __init__(self, input_tokens: int, output_tokens: int) -> None:
        self.input_tokens, self.output_tokens = input_tokens, output_tokens


def test_the_list_of_responses_is_the_callers_own_newest_first_a_page_at_a_time(stack: LocalStack) -> None:
    user, other = Account(stack), Account(stack)
    made = [
        user.api.http.post(
            "/responses", json={"model": "sim-chat", "input": f"n{i}", "background": True}
        ).json()["id"]
        for i in range(3)
    ]
    other.api.http.post("/responses", json={"model": "sim-chat", "input": "not yours", "background": True})
    first = user.api.http.get("/responses", params={"limit": 2}).raise_for_status().json()
    assert [r["id"] for r in first["data"]] == made[::-1][:2] and first["has_more"] is True
    assert all("output" not in r and r["object"] == "response" for r in first["data"])
    rest = user.api.http.get("/responses", params={"limit": 2, "after": first["last_id"]}).json()
    assert [r["id"] for r in rest["data"]] == made[:1] and rest["has_more"] is False
    assert user.api.http.get("/responses", params={"after": "batch_1"}).status_code == 400
