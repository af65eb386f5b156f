"""The local stack's runtime: moto server + bootstrap, the Lambda hook, the adapter, the pollers.

One stack (moto, one api adapter, one worker poller; no simulator) runs for the module,
with the stand-in handlers of ``tests.integration.fake_handlers``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from batchgw.config import resources
from batchgw.config.settings import Settings
from batchgw.domain.principal import hash_key

from local import env as local_env
from local.adapter import API_GATEWAY_MAX_BODY, build_event
from local.env import port_open
from local.environments import EnvironmentPool
from local.keys import LOCAL_KEYS
from local.poller import Poller, failed_message_ids, sqs_event
from local.run import LocalStack
from tests.integration import fake_handlers

FAKES = "tests.integration.fake_handlers"
WORKER_TIMEOUT = "0.2"  # queue visibility = 6 x this, rounded down: 1 s


def wait_for(condition: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    log_dir = tmp_path_factory.mktemp("local-stack-logs")
    overrides = {
        local_env.LAMBDA_HANDLERS_ENV: json.dumps({"batchgw-lifecycle": f"{FAKES}.lifecycle"}),
        local_env.API_HANDLER_ENV: f"{FAKES}.echo_api",
        local_env.WORKER_HANDLER_ENV: f"{FAKES}.s3_worker",
        "BATCH_WORKER_TIMEOUT_SECONDS": WORKER_TIMEOUT,
        "BATCHGW_LOCAL_DAY_SECONDS": "1",  # the bucket's lifecycle rules in seconds, not days
    }
    with LocalStack(0, 0, 0, env_overrides=overrides, workers=1, simulator=False, log_dir=log_dir) as running:
        yield running


class Aws:
    """boto3 clients on the stack's moto (no change to this process's environment)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.session = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=local_env.REGION
        )

    def client(self, service: str) -> Any:
        return self.session.client(service, endpoint_url=self.env["AWS_ENDPOINT_URL"])  # type: ignore[call-overload]

    def read_json(self, key: str) -> Any | None:
        try:
            body = self.client("s3").get_object(Bucket=self.env["BATCHGW_DATA_BUCKET"], Key=key)["Body"]
        except self.client("s3").exceptions.NoSuchKey:
            return None
        return json.loads(body.read())


@pytest.fixture(scope="module")
def aws(stack: LocalStack) -> Aws:
    return Aws(stack.env)


# --- env --------------------------------------------------------------------------------------


def test_ports_of_zero_become_distinct_free_ports() -> None:
    ports = local_env.Ports(api=0, sim=0, moto=0).resolved()
    assert len({ports.api, ports.sim, ports.moto}) == 3
    assert all(ports.__dict__.values())


def test_stack_env_points_everything_at_moto_and_passes_batch_settings_through() -> None:
    ports = local_env.Ports(api=9180, sim=9181, moto=9182)
    env = local_env.stack_env(
        ports, base={"BATCH_LEASE_SECONDS": "5", "HOME": "/x", "BATCHGW_BATCHES_TABLE": "nope"}
    )
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9182"
    assert env["MOTO_PORT"] == "9182" and env["BATCHGW_SIM_PORT"] == "9181" and env["BATCHGW_PORT"] == "9180"
    assert env["BATCH_LEASE_SECONDS"] == "5" and "HOME" not in env
    assert env["BATCHGW_BATCHES_TABLE"] == "batchgw-batches"  # the stack owns resource names
    assert env["BATCHGW_WORK_QUEUE_URL"] == "http://127.0.0.1:9182/123456789012/batchgw-work"
    assert env["BATCHGW_STATE_MACHINE_ARN"].endswith(":stateMachine:batchgw-batch")
    assert Path(env["BATCHGW_MODELS_CONFIG"]).is_file()
    child = local_env.process_env(
        env, base={"AWS_PROFILE": "prod", "AWS_ENDPOINT_URL_S3": "x", "PATH": "/bin"}
    )
    assert "AWS_PROFILE" not in child and "AWS_ENDPOINT_URL_S3" not in child and child["PATH"] == "/bin"


def test_handler_pool_gives_each_concurrent_environment_its_own_module_globals() -> None:
    pool = local_env.HandlerPool(f"{FAKES}.worker")
    with pool.environment() as first, pool.environment() as second:
        assert first is fake_handlers.worker  # the first environment is the module itself
        assert second is not first and second.__globals__["SEEN"] is not fake_handlers.SEEN
    with pool.environment() as again:  # environments are reused, not recreated
        assert again in (first, second)
    assert pool.size == 2


def test_an_environment_idle_past_its_timeout_is_reaped_and_the_next_invocation_starts_one_cold() -> None:
    pool = EnvironmentPool(
        f"{FAKES}.worker", max_size=2, function_name="batchgw-worker", memory_mb=128, idle_seconds=0.5
    )
    try:
        pool.warm()
        (first,) = pool.pids()
        wait_for(lambda: pool.size == 0 and pool.reaped == 1, timeout=15)
        assert not _alive(first)
        with pool.environment() as environment:  # a new one, cold
            assert environment.pid != first
            assert environment.invoke({"Records": []}, 10) == {"batchItemFailures": []}
        assert pool.started == 2
    finally:
        pool.close()


# --- moto + bootstrap ------------------------------------------------------------------------


def test_bootstrap_creates_every_resource_from_the_specs(stack: LocalStack, aws: Aws) -> None:
    dynamodb, sqs, s3 = aws.client("dynamodb"), aws.client("sqs"), aws.client("s3")
    for spec in resources.TABLES:
        table = dynamodb.describe_table(TableName=stack.env[spec.env_var])["Table"]
        assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
        assert table["KeySchema"][0] == {"AttributeName": spec.partition.name, "KeyType": "HASH"}
        if spec.sort:
            assert table["KeySchema"][1] == {"AttributeName": spec.sort.name, "KeyType": "RANGE"}
        indexes = {i["IndexName"] for i in table.get("GlobalSecondaryIndexes", [])}
        assert indexes == {i.name for i in spec.indexes}
        ttl = dynamodb.describe_time_to_live(TableName=stack.env[spec.env_var])["TimeToLiveDescription"]
        if spec.ttl_attribute:
            assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": spec.ttl_attribute}

    visibility = Settings.from_env(stack.env).work_visibility_seconds
    for queue in resources.QUEUES:
        url = stack.env[queue.env_var]
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert attributes["VisibilityTimeout"] == str(queue.visibility_seconds or visibility)
        assert (attributes.get("FifoQueue") == "true") is queue.fifo
        redrive = json.loads(attributes["RedrivePolicy"])
        assert int(redrive["maxReceiveCount"]) == queue.max_receive_count
        assert redrive["deadLetterTargetArn"].endswith(local_env.dead_letter_queue_name(queue))

    for bucket in resources.BUCKETS:
        s3.head_bucket(Bucket=stack.env[bucket.env_var])

    table = stack.env[resources.CONTROL.env_var]
    for api_key, (user_id, role) in LOCAL_KEYS.items():
        by_hash = dynamodb.get_item(
            TableName=table, Key={"pk": {"S": f"key#{hash_key(api_key)}"}, "sk": {"S": "key"}}
        )["Item"]
        profile = dynamodb.get_item(
            TableName=table, Key={"pk": {"S": f"user#{user_id}"}, "sk": {"S": "profile"}}
        )
        assert by_hash["user_id"]["S"] == user_id and profile["Item"]["role"]["S"] == role

    machine = aws.client("stepfunctions").describe_state_machine(
        stateMachineArn=stack.env["BATCHGW_STATE_MACHINE_ARN"]
    )
    assert "${" not in machine["definition"]
    assert local_env.function_arn("batchgw-lifecycle") in machine["definition"]


# --- the Lambda hook -------------------------------------------------------------------------


def _lambda_task(action: str, wait_for_token: bool = False, **extra: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"action": action, "batch_id.$": "$.batch_id"}
    if wait_for_token:
        payload["token.$"] = "$$.Task.Token"
    suffix = ".waitForTaskToken" if wait_for_token else ""
    return {
        "Type": "Task",
        "Resource": f"arn:aws:states:::lambda:invoke{suffix}",
        "Parameters": {"FunctionName": local_env.function_arn("batchgw-lifecycle"), "Payload": payload},
        **extra,
    }


def _run_to_end(sfn: Any, definition: dict[str, Any], execution_input: dict[str, Any]) -> str:
    machine = sfn.create_state_machine(
        name=f"test-{uuid.uuid4().hex[:8]}", definition=json.dumps(definition), roleArn=local_env.role_arn()
    )["stateMachineArn"]
    name = execution_input.get("batch_id") or uuid.uuid4().hex
    return str(
        sfn.start_execution(stateMachineArn=machine, name=name, input=json.dumps(execution_input))[
            "executionArn"
        ]
    )


def _finished(sfn: Any, execution: str) -> dict[str, Any]:
    return dict(
        wait_for(lambda: (d := sfn.describe_execution(executionArn=execution))["status"] != "RUNNING" and d)
    )


def test_lambda_tasks_run_the_handler_and_a_parked_task_resumes_on_send_task_success(aws: Aws) -> None:
    definition = {
        "StartAt": "Prepare",
        "States": {
            "Prepare": _lambda_task(
                "prepare", ResultSelector={"next.$": "$.Payload.next"}, ResultPath="$.step", Next="Park"
            ),
            "Park": _lambda_task("park", wait_for_token=True, ResultPath="$.step", Next="Finalize"),
            "Finalize": _lambda_task(
                "finalize", ResultSelector={"status.$": "$.Payload.status"}, ResultPath="$.final", End=True
            ),
        },
    }
    sfn = aws.client("stepfunctions")
    batch_id = f"batch_{uuid.uuid4().hex[:8]}"
    execution = _run_to_end(sfn, definition, {"batch_id": batch_id})

    token = wait_for(lambda: aws.read_json(f"tokens/{batch_id}"))  # parked by lambda:invoke.waitForTaskToken
    prepare = aws.read_json(f"calls/{batch_id}/prepare")
    assert prepare["function"] == "batchgw-lifecycle"
    assert 0 < prepare["remaining_ms"] <= 900_000
    assert sfn.describe_execution(executionArn=execution)["status"] == "RUNNING"

    sfn.send_task_success(taskToken=token, output=json.dumps({"next": "finalize"}))
    done = _finished(sfn, execution)
    assert done["status"] == "SUCCEEDED"
    assert json.loads(done["output"]) == {
        "batch_id": batch_id,
        "step": {"next": "finalize"},  # the task's result is what send_task_success carried
        "final": {"status": "completed"},
    }


def test_a_handler_exception_is_a_task_failure_that_catch_sees(aws: Aws) -> None:
    invoked = aws.client("lambda").invoke(FunctionName="batchgw-lifecycle", Payload=b'{"action": "boom"}')
    assert invoked["FunctionError"] == "Unhandled"
    assert json.loads(invoked["Payload"].read())["errorType"] == "ValueError"

    catch = [{"ErrorEquals": ["States.TaskFailed"], "ResultPath": "$.error", "Next": "Caught"}]
    definition = {
        "StartAt": "Boom",
        "States": {
            "Boom": _lambda_task("boom", Catch=catch, End=True),
            "Caught": {"Type": "Pass", "End": True},
        },
    }
    sfn = aws.client("stepfunctions")
    done = _finished(sfn, _run_to_end(sfn, definition, {"batch_id": f"boom-{uuid.uuid4().hex[:6]}"}))
    assert done["status"] == "SUCCEEDED"
    error = json.loads(done["output"])["error"]
    assert error["Error"] == "ValueError"  # the runtime's errorType names the error, as on AWS
    assert "boom for boom-" in error["Cause"]


# --- the adapter ---------------------------------------------------------------------------------


def test_adapter_turns_a_request_into_an_http_api_v2_event(stack: LocalStack) -> None:
    response = httpx.post(
        f"{stack.api_url}/batches?status=a&status=b&empty=",
        content=b'{"x": 1}',
        headers=[
            ("Content-Type", "application/json"),
            ("X-Rep", "1"),
            ("X-Rep", "2"),
            ("Cookie", "c=1; d=2"),
        ],
    )
    assert response.status_code == 200
    assert response.headers["apigw-requestid"]
    payload = response.json()
    event = payload["event"]
    assert payload["function"] == "batchgw-api"
    assert event["version"] == "2.0" and event["routeKey"] == "$default"
    assert event["rawPath"] == "/v1/batches"
    assert event["rawQueryString"] == "status=a&status=b&empty="
    assert event["queryStringParameters"] == {"status": "a,b", "empty": ""}
    assert event["headers"]["x-rep"] == "1,2"
    assert "cookie" not in event["headers"] and event["cookies"] == ["c=1", "d=2"]
    assert event["body"] == '{"x": 1}' and event["isBase64Encoded"] is False
    http = event["requestContext"]["http"]
    assert http == {
        "method": "POST",
        "path": "/v1/batches",
        "protocol": "HTTP/1.1",
        "sourceIp": "127.0.0.1",
        "userAgent": response.request.headers["user-agent"],
    }
    assert event["requestContext"]["stage"] == "$default"


def test_adapter_passes_binary_bodies_as_base64_both_ways(stack: LocalStack) -> None:
    sent = httpx.post(
        f"{stack.api_url}/files",
        content=b"\x00\x01\xff",
        headers={"Content-Type": "application/octet-stream"},
    )
    event = sent.json()["event"]
    assert event["isBase64Encoded"] is True and event["body"] == "AAH/"

    answered = httpx.get(f"{stack.api_url}/binary")
    assert answered.status_code == 201
    assert answered.content == b"\x00\x01\x02\xff"
    assert answered.headers.get_list("set-cookie") == ["a=1", "b=2"]

    bare = httpx.get(f"{stack.api_url}/bare")
    assert bare.status_code == 200 and bare.json() == {"bare": True}


def test_adapter_enforces_api_gateway_and_lambda_limits(stack: LocalStack) -> None:
    with httpx.Client(timeout=30) as client:
        too_big = client.post(f"{stack.api_url}/batches", content=b"x" * (API_GATEWAY_MAX_BODY + 1))
        assert too_big.status_code == 413
        error = too_big.json()["error"]  # not the echo: no handler call; the API's shape, not API Gateway's
        assert error["type"] == "request_too_large" and error["code"] == 413
        assert f"{API_GATEWAY_MAX_BODY + 1} bytes" in error["message"] and "/v1/uploads" in error["message"]
        # over Lambda's 6 MB invoke limit, under API Gateway's 10 MB
        assert client.post(f"{stack.api_url}/batches", content=b"x" * (7 * 1024 * 1024)).status_code == 413
        big_answer = client.get(f"{stack.api_url}/big")
        assert (big_answer.status_code, big_answer.json()) == (502, {"message": "Internal Server Error"})
        for path in ("big-escaped", "surrogate"):  # too large for 3.11's runtime; unencodable for 3.12's
            refused = client.get(f"{stack.api_url}/{path}")
            assert (refused.status_code, refused.json()) == (502, {"message": "Internal Server Error"})
        failing = client.get(f"{stack.api_url}/raise")
        assert (failing.status_code, failing.json()) == (500, {"message": "Internal Server Error"})
        assert client.get(f"{stack.api_url}/still-serving").status_code == 200


@pytest.mark.parametrize("method", ["TRACE", "PROPFIND"])
def test_adapter_hands_every_method_to_the_handler_as_an_any_route_does(
    stack: LocalStack, method: str
) -> None:
    response = httpx.request(method, f"{stack.api_url}/batches")
    assert response.status_code == 200
    assert response.json()["event"]["requestContext"]["http"]["method"] == method


def test_build_event_omits_body_and_query_when_absent() -> None:
    event = build_event(
        method="GET", target="/v1/batches", headers=[("Host", "h:1")], body=b"", source_ip="1.2.3.4"
    )
    assert "body" not in event and "queryStringParameters" not in event and "cookies" not in event
    assert event["headers"]["x-forwarded-for"] == "1.2.3.4"


# --- the pollers ---------------------------------------------------------------------------------


@pytest.fixture
def test_queue(aws: Aws) -> Iterator[str]:
    """A queue of its own (2 s visibility, DLQ after 2 receives), outside the stack's workers."""
    sqs = aws.client("sqs")
    name = f"poller-test-{uuid.uuid4().hex[:8]}"
    dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": "2",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "2"}),
        },
    )["QueueUrl"]
    yield url
    sqs.delete_queue(QueueUrl=url)
    sqs.delete_queue(QueueUrl=dlq)


def _counts(sqs: Any, url: str) -> tuple[int, int]:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


@pytest.fixture
def seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[dict[str, Any]]]:
    """The records ``fake_handlers.worker`` saw, in whichever execution environment (a process)."""
    path = tmp_path / "seen.jsonl"
    path.touch()
    monkeypatch.setenv(fake_handlers.SEEN_FILE_ENV, str(path))
    return lambda: [json.loads(line) for line in path.read_text().splitlines()]


def test_poller_deletes_successes_and_leaves_reported_failures_for_redelivery(
    aws: Aws, test_queue: str, seen: Callable[[], list[dict[str, Any]]]
) -> None:
    sqs = aws.client("sqs")
    for index, fail in enumerate([False, True, False]):
        sqs.send_message(
            QueueUrl=test_queue,
            MessageBody=json.dumps({"n": index, "fail": fail}),
            MessageAttributes={"kind": {"DataType": "String", "StringValue": "chain"}},
        )
    poller = Poller(test_queue, f"{FAKES}.worker", sqs=sqs, wait_seconds=0, timeout_seconds=60)
    try:
        _deletes_successes_and_leaves_failures(sqs, test_queue, poller, seen)
    finally:
        poller.stop(grace_seconds=0)


def _deletes_successes_and_leaves_failures(
    sqs: Any, test_queue: str, poller: Poller, seen: Callable[[], list[dict[str, Any]]]
) -> None:
    wait_for(lambda: poller.poll_once() >= 0 and len(seen()) >= 3)

    assert poller.stats.deleted == 2 and poller.stats.failed == 1
    assert _counts(sqs, test_queue) == (0, 1)  # the failure is in flight until its visibility ends
    record = seen()[0]
    assert record["eventSource"] == "aws:sqs" and record["eventSourceARN"].endswith(
        test_queue.rsplit("/", 1)[1]
    )
    assert record["attributes"]["ApproximateReceiveCount"] == "1" and "SentTimestamp" in record["attributes"]
    assert record["messageAttributes"]["kind"] == {
        "stringValue": "chain",
        "stringListValues": [],
        "binaryListValues": [],
        "dataType": "String",
    }
    assert 0 < record["remaining_ms"] <= 60_000

    # The failure comes back after its visibility timeout, and after maxReceiveCount it is dead-lettered.
    wait_for(lambda: poller.poll_once() and seen()[-1]["attributes"]["ApproximateReceiveCount"] == "2")
    assert json.loads(seen()[-1]["body"])["fail"] is True
    dlq = sqs.get_queue_url(QueueName=test_queue.rsplit("/", 1)[1] + "-dlq")["QueueUrl"]
    wait_for(lambda: poller.poll_once() == 0 and _counts(sqs, dlq)[0] == 1)


def test_poller_leaves_the_whole_batch_when_the_handler_raises(aws: Aws, test_queue: str) -> None:
    sqs = aws.client("sqs")
    sqs.send_message_batch(
        QueueUrl=test_queue,
        Entries=[{"Id": "ok", "MessageBody": "{}"}, {"Id": "bad", "MessageBody": '{"raise": true}'}],
    )
    poller = Poller(test_queue, f"{FAKES}.worker", sqs=sqs, wait_seconds=0)
    try:
        wait_for(lambda: poller.poll_once() == 0 and poller.stats.failed == 2)
    finally:
        poller.stop(grace_seconds=0)
    assert poller.stats.deleted == 0
    assert sum(_counts(sqs, test_queue)) == 2


def test_a_stopping_poller_waits_for_invocations_not_long_polls_and_gives_back_what_it_receives(
    aws: Aws, test_queue: str, seen: Callable[[], list[dict[str, Any]]]
) -> None:
    sqs = aws.client("sqs")
    poller = Poller(test_queue, f"{FAKES}.worker", sqs=sqs, environments=2, wait_seconds=20)
    poller.start()
    sqs.send_message(QueueUrl=test_queue, MessageBody=json.dumps({"n": 1}))
    wait_for(lambda: poller.stats.deleted == 1)  # an idle slot's long poll answers at once

    started = time.monotonic()
    assert poller.stop(grace_seconds=15)  # both slots wait in a 20 s long poll: not waited for
    assert time.monotonic() - started < 5
    sqs.send_message(QueueUrl=test_queue, MessageBody=json.dumps({"n": 2}))
    # a slot still in its long poll receives it, and gives it back unrun
    wait_for(lambda: not any(slot.is_alive() for slot in poller._slots), timeout=30)
    assert _counts(sqs, test_queue) == (1, 0)
    assert len(seen()) == 1 and poller.stats.invocations == 1


def test_partial_failure_response_is_read_as_lambda_reads_it() -> None:
    ids = ["a", "b", "c"]
    assert failed_message_ids(None, ids) == set()
    assert failed_message_ids({"batchItemFailures": []}, ids) == set()
    assert failed_message_ids({"batchItemFailures": [{"itemIdentifier": "b"}]}, ids) == {"b"}
    assert failed_message_ids({"batchItemFailures": [{"itemIdentifier": "zzz"}]}, ids) == set(ids)
    assert failed_message_ids({"batchItemFailures": [{"itemIdentifier": ""}]}, ids) == set(ids)
    assert failed_message_ids({"batchItemFailures": [{"id": "b"}]}, ids) == set(ids)
    assert failed_message_ids({"not": object()}, ids) == set(ids)


def test_sqs_event_carries_binary_attributes_base64_encoded() -> None:
    message = {
        "MessageId": "m",
        "ReceiptHandle": "r",
        "Body": "{}",
        "MD5OfBody": "x",
        "Attributes": {"ApproximateReceiveCount": "1"},
        "MessageAttributes": {"blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"}},
    }
    record = sqs_event([message], "arn:aws:sqs:us-east-1:123456789012:q")["Records"][0]
    assert record["messageAttributes"]["blob"]["binaryValue"] == "AAE="
    assert record["awsRegion"] == "us-east-1"


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_a_killed_worker_leaves_and_a_restarted_one_takes_over(stack: LocalStack, aws: Aws) -> None:
    sqs = aws.client("sqs")
    queue = stack.env[resources.WORK_QUEUE.env_var]
    first = {str(pid) for pid in stack.environment_pids("worker-0")}  # its environments: processes of its own

    def seen_by(message_id: str) -> set[str]:
        listed = aws.client("s3").list_objects_v2(
            Bucket=stack.env["BATCHGW_DATA_BUCKET"], Prefix=f"seen/{message_id}/"
        )
        return {item["Key"].rsplit("/", 1)[1] for item in listed.get("Contents", [])}

    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps({"id": "before"}))
    assert len(wait_for(lambda: seen_by("before"))) == 1 and seen_by("before") <= first

    first_pid = stack.worker_pids[0]
    stack.kill_worker(0)  # and its environments with it
    assert stack.worker_pids[0] is None and stack.dead_children() == []
    wait_for(lambda: not any(_alive(int(pid)) for pid in first), timeout=10)  # reaped by init
    second_pid = stack.start_worker(0)
    assert second_pid != first_pid
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps({"id": "after"}))
    assert len(wait_for(lambda: seen_by("after"))) == 1
    assert seen_by("after") <= {str(pid) for pid in stack.environment_pids("worker-0")}
    assert not seen_by("after") & first
    stack.check()


def test_a_crashed_worker_or_api_process_is_replaced_and_the_stack_keeps_serving(
    stack: LocalStack, aws: Aws
) -> None:
    sqs = aws.client("sqs")
    queue = stack.env[resources.WORK_QUEUE.env_var]

    def seen_by(message_id: str) -> set[str]:
        listed = aws.client("s3").list_objects_v2(
            Bucket=stack.env["BATCHGW_DATA_BUCKET"], Prefix=f"seen/{message_id}/"
        )
        return {item["Key"].rsplit("/", 1)[1] for item in listed.get("Contents", [])}

    workers_before = set(stack.pids("worker-"))  # the poller's and its environments'
    crashed = stack.crash("worker-")  # one environment: the poller replaces it
    replacement = wait_for(lambda: (set(stack.pids("worker-")) - workers_before) or None, timeout=10)
    assert crashed not in stack.pids("worker-") and len(replacement) == 1
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps({"id": "after-crash"}))
    assert wait_for(lambda: seen_by("after-crash"), timeout=20)  # some worker, old or new, takes it

    api_before = set(stack.pids("api-"))
    stack.crash("api-")
    wait_for(lambda: (set(stack.pids("api-")) - api_before) or None, timeout=10)
    wait_for(lambda: port_open(stack.ports.api), timeout=20)
    answered = httpx.post(f"{stack.api_url}/anything", content=b"{}")
    assert answered.status_code == 200
    wait_for(lambda: len(stack.replaced) == 2, timeout=10)
    assert stack.dead_children() == []
    stack.check()


def test_the_buckets_lifecycle_rules_are_applied_locally(stack: LocalStack, aws: Aws) -> None:
    s3 = aws.client("s3")
    bucket = stack.env["BATCHGW_DATA_BUCKET"]
    s3.put_object(Bucket=bucket, Key="incoming/abandoned", Body=b"x")  # rule: a "day"
    s3.put_object(Bucket=bucket, Key="inputs/kept", Body=b"x")  # no rule

    def keys() -> set[str]:
        return {item["Key"] for item in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}

    wait_for(lambda: "incoming/abandoned" not in keys(), timeout=20)
    assert "inputs/kept" in keys()
