"""The local moto server keeps connections between requests (``local.keep_alive``), and a
request's body never runs into the next request's."""

from __future__ import annotations

import json
import socket
import socketserver
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer
from moto.sqs.models import SQSBackend

from local import keep_alive, moto_server
from tests.integration.conftest import FAKE_AWS_ENV, REGION
from tests.support import bare_table

_AUTH = (
    f"AWS4-HMAC-SHA256 Credential=testing/20260101/{REGION}/dynamodb/aws4_request, "
    "SignedHeaders=host, Signature=0"
)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, list[Any]]]:
    """A moto server with kept connections on a free port, and the connections it accepted."""
    for name, value in FAKE_AWS_ENV.items():
        monkeypatch.setenv(name, value)
    accepted: list[Any] = []
    process_request = socketserver.ThreadingMixIn.process_request

    def counted(self: Any, request: Any, address: Any) -> None:
        accepted.append(address)
        process_request(self, request, address)

    monkeypatch.setattr(socketserver.ThreadingMixIn, "process_request", counted)
    monkeypatch.setattr(
        keep_alive.threaded_moto_server,
        "MotoRequestHandler",
        keep_alive.threaded_moto_server.MotoRequestHandler,
    )
    assert keep_alive.install()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    try:
        yield moto._server.port, accepted  # type: ignore[union-attr]
    finally:
        moto.stop()


def _table(port: int, name: str) -> Any:
    dynamodb = boto3.client("dynamodb", endpoint_url=f"http://127.0.0.1:{port}", region_name=REGION)
    return bare_table(dynamodb, name)


def test_calls_share_one_connection_and_each_gets_its_own_answer(server: tuple[int, list[Any]]) -> None:
    port, accepted = server
    dynamodb = _table(port, "kept")
    for i in range(40):
        dynamodb.put_item(TableName="kept", Item={"pk": {"S": f"k{i}"}, "v": {"S": "x" * i}})
    got = [
        dynamodb.get_item(TableName="kept", Key={"pk": {"S": f"k{i}"}})["Item"]["v"]["S"] for i in range(40)
    ]
    assert got == ["x" * i for i in range(40)]
    assert len(accepted) == 1  # 81 calls, one connection

    # botocore's S3 uploads expect "100 Continue": they are served as before, and close.
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name=REGION)
    s3.create_bucket(Bucket="kept-bucket")
    s3.put_object(Bucket="kept-bucket", Key="k", Body=b"0123456789" * 1000)
    assert s3.get_object(Bucket="kept-bucket", Key="k")["Body"].read() == b"0123456789" * 1000


def _request(target: str, body: dict[str, Any]) -> bytes:
    payload = json.dumps(body).encode()
    head = (
        "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-amz-json-1.0\r\n"
        f"X-Amz-Target: DynamoDB_20120810.{target}\r\nAuthorization: {_AUTH}\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


def _responses(sock: socket.socket, count: int) -> list[tuple[int, dict[str, Any]]]:
    """Read ``count`` responses (each with a Content-Length) off one connection."""
    buffer = b""
    out: list[tuple[int, dict[str, Any]]] = []
    while len(out) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            assert chunk, f"the connection closed after {len(out)} responses"
            buffer += chunk
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        length = int(headers["content-length"])
        while len(buffer) < length:
            chunk = sock.recv(65536)
            assert chunk, "the connection closed mid-response"
            buffer += chunk
        body, buffer = buffer[:length], buffer[length:]
        out.append((int(lines[0].split()[1]), json.loads(body)))
    return out


def test_requests_sent_back_to_back_on_one_connection_are_each_answered(
    server: tuple[int, list[Any]],
) -> None:
    port, _ = server
    _table(port, "pipelined")
    put = _request("PutItem", {"TableName": "pipelined", "Item": {"pk": {"S": "a"}, "v": {"S": "first"}}})
    get = _request("GetItem", {"TableName": "pipelined", "Key": {"pk": {"S": "a"}}, "ConsistentRead": True})
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(put + get)  # the second arrives while the first is served
        answers = _responses(sock, 2)
        assert [status for status, _ in answers] == [200, 200]
        assert answers[1][1]["Item"]["v"] == {"S": "first"}
        sock.sendall(get)  # and the connection serves on
        assert _responses(sock, 1)[0][1]["Item"]["v"] == {"S": "first"}


def test_a_long_poll_whose_client_went_away_takes_no_message(
    server: tuple[int, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed worker's open ReceiveMessage must not hide the next messages for a
    visibility timeout: the live poller gets them at once, as on SQS."""
    monkeypatch.setattr(SQSBackend, "receive_message", SQSBackend.receive_message)
    moto_server.install_atomic_receive()
    port, _ = server
    sqs = boto3.client("sqs", endpoint_url=f"http://127.0.0.1:{port}", region_name=REGION)
    url = sqs.create_queue(QueueName="polled", Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
    auth = _AUTH.replace("/dynamodb/", "/sqs/")
    payload = json.dumps({"QueueUrl": url, "WaitTimeSeconds": 10, "MaxNumberOfMessages": 10}).encode()
    receive = (
        "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-amz-json-1.0\r\n"
        f"X-Amz-Target: AmazonSQS.ReceiveMessage\r\nAuthorization: {auth}\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload
    dead = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(4)]
    for sock in dead:
        sock.sendall(receive)  # long polls, open on an empty queue
    time.sleep(0.3)  # (whether they wait yet or not: a gone client takes nothing either way)
    for sock in dead:
        sock.close()  # their worker was killed
    sqs.send_message(QueueUrl=url, MessageBody="next")
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, MaxNumberOfMessages=10).get("Messages", [])
    assert [m["Body"] for m in got] == ["next"]
