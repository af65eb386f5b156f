"""The dashboard and the alarms an operator watches, and a topic the alarms notify."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, Stack
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from batchgw.config import resources
from constructs import Construct

PERIOD = Duration.minutes(5)
NAMESPACE = "batchgw"  # of the functions' EMF metrics (``batchgw.observability``)
SERVICE = {"service": "batchgw"}
# Work messages wait at most 15 minutes before they are visible (SQS's longest delay); a
# chain's message older than an hour means no worker is taking work.
OLDEST_MESSAGE_ALARM_SECONDS = 3600
# The operator's runbook: one entry per alarm, headed by the alarm's entry name. Each alarm is
# named ``<stack>-<entry>`` (``-<model>`` after it for a per-model one) and its description,
# which the notification carries, ends with the entry's address in the repository
# (``tests/infra/test_runbook.py`` keeps the alarms and the entries in step).
RUNBOOK = "docs/operate/runbook.md"


class Observability(Construct):
    """A dashboard of the API, the worker, the queues and the workflow; alarms on the
    signs that work is being lost: dead letters, failed executions, worker errors.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        http_api: apigwv2.HttpApi,
        api: lambda_.Function,
        admin: lambda_.Function,
        worker: lambda_.Function,
        lifecycle: lambda_.Function,
        interactive: lambda_.Function,
        queues: dict[str, sqs.Queue],
        dead_letter_queues: dict[str, sqs.Queue],
        state_machine: sfn.StateMachine,
        models: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        # Not KMS-encrypted: CloudWatch cannot publish to a topic under the AWS-managed
        # SNS key, and an alarm notification carries no user data.
        self.alarm_topic = sns.Topic(self, "AlarmTopic", display_name="batchgw alarms", enforce_ssl=True)
        self.alarms: list[cloudwatch.Alarm] = []

        for name, dlq in dead_letter_queues.items():
            self._alarm(
                f"{name}DeadLetters",
                dlq.metric_approximate_number_of_messages_visible(
                    period=Duration.minutes(1), statistic="Maximum"
                ),
                f"Messages of the {name} queue reached its dead-letter queue.",
            )
        self._alarm(
            "FailedExecutions",
            state_machine.metric_failed(period=PERIOD, statistic="Sum"),
            "A batch workflow execution failed: its batch is left unfinished (BatchWorkflowBroken, "
            "States.Runtime) or an ended batch's data was not purged (PurgeFailed).",
        )
        self._alarm(
            "WorkerErrors",
            worker.metric_errors(period=PERIOD, statistic="Sum"),
            "Worker invocations failed (not partial batch failures: the whole invocation).",
        )
        # The work queue only: a webhook event may rightly wait hours for its user's endpoint.
        work = queues[resources.WORK_QUEUE.logical_id]
        self._alarm(
            "WorkOldestMessage",
            work.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum"),
            "A message of the work queue has waited over an hour: no worker is taking work.",
            threshold=OLDEST_MESSAGE_ALARM_SECONDS,
            evaluation_periods=2,
        )
        # One alert per model, as the spec's is: the worker writes the metric per model only
        # (dimensions service and model), so each model of the catalog has its own alarm.
        for number, model in enumerate(sorted(models)):
            self._alarm(
                "ModelWaitingForCapacity",
                _custom("ModelWaitingForCapacity", "Maximum", period=Duration.minutes(10), model=model),
                f"Batch model waiting for capacity: {model} has had queued batch requests and served "
                "none for BATCH_QUEUED_ALERT_HOURS. Resolved when it serves one.",
                construct_id=f"ModelWaitingForCapacity{number}",
                subject=model,
            )

        dashboard = cloudwatch.Dashboard(self, "Dashboard", default_interval=Duration.hours(3))
        dashboard.add_widgets(
            _graph("API requests", [http_api.metric_count(period=PERIOD)]),
            _graph(
                "API errors",
                [http_api.metric_client_error(period=PERIOD), http_api.metric_server_error(period=PERIOD)],
            ),
            _graph("API latency (p99)", [http_api.metric_latency(period=PERIOD, statistic="p99")]),
        )
        functions = {
            "api": api,
            "admin": admin,
            "worker": worker,
            "lifecycle": lifecycle,
            "interactive": interactive,
        }
        dashboard.add_widgets(
            _graph(
                "Function errors",
                [fn.metric_errors(period=PERIOD, label=label) for label, fn in functions.items()],
            ),
            _graph(
                "Worker duration",
                [
                    worker.metric_duration(period=PERIOD, statistic=stat, label=stat)
                    for stat in ("p50", "p99", "Maximum")
                ],
            ),
            _graph("Worker throttles", [worker.metric_throttles(period=PERIOD)]),
        )
        dashboard.add_widgets(
            _graph(
                "Queue depth",
                [
                    q.metric_approximate_number_of_messages_visible(period=PERIOD, label=n)
                    for n, q in queues.items()
                ]
                + [
                    q.metric_approximate_number_of_messages_not_visible(period=PERIOD, label=f"{n} in flight")
                    for n, q in queues.items()
                ],
            ),
            _graph(
                "Oldest message age",
                [
                    q.metric_approximate_age_of_oldest_message(period=PERIOD, label=n)
                    for n, q in queues.items()
                ],
            ),
            _graph(
                "Dead-letter queue depth",
                [
                    q.metric_approximate_number_of_messages_visible(period=PERIOD, label=n)
                    for n, q in dead_letter_queues.items()
                ],
            ),
        )
        dashboard.add_widgets(
            _graph(
                "Batch requests by outcome (per model)",
                [
                    _per_model(name, "Sum")
                    for name in ("RequestsStarted", "RequestsSucceeded", "RequestsFailed", "RequestsRetried")
                ],
            ),
            _graph(
                "Upstream latency, answer to next call, queue wait (p50, p99)",
                [_per_model("UpstreamLatency", stat) for stat in ("p50", "p99")]
                + [_per_model("AnswerToNextCall", stat) for stat in ("p50", "p99")]
                + [_per_model("QueueWait", stat) for stat in ("p50", "p99")],
            ),
            _graph(
                "Slots in use, models waiting for capacity",
                [_per_model("SlotsInUse", "Maximum"), _per_model("ModelWaitingForCapacity", "Maximum")],
            ),
        )
        # Background responses and flex requests are batches of one request: the worker writes
        # their attempts per source too (``source``: batch, background or flex), across models.
        dashboard.add_widgets(
            _graph(
                "Requests started and retried per source (batch, background, flex)",
                [_per_source(name, "Sum") for name in ("RequestsStarted", "RequestsRetried")],
            ),
            _graph(
                "Queue wait per source (p50, p99)",
                [_per_source("QueueWait", stat) for stat in ("p50", "p99")],
            ),
        )
        dashboard.add_widgets(
            _graph(
                "Batches by final status",
                [
                    cloudwatch.MathExpression(
                        expression=f"SEARCH('{{{NAMESPACE},service,status}} MetricName=\"BatchesEnded\"', "
                        f"'Sum', {int(PERIOD.to_seconds())})",
                        label="",
                        period=PERIOD,
                    )
                ],
            ),
            _graph(
                "Workflow executions",
                [
                    state_machine.metric_started(period=PERIOD),
                    state_machine.metric_succeeded(period=PERIOD),
                    state_machine.metric_failed(period=PERIOD),
                    state_machine.metric_timed_out(period=PERIOD),
                    state_machine.metric_aborted(period=PERIOD),
                ],
            ),
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms), width=16),
        )

    def _alarm(
        self,
        entry: str,
        metric: cloudwatch.Metric,
        description: str,
        *,
        construct_id: str | None = None,
        subject: str | None = None,
        threshold: float = 0,
        evaluation_periods: int = 1,
    ) -> None:
        """An alarm notifying the topic, named after its runbook ``entry`` (and ``subject``, of
        one of several alarms sharing an entry); ``construct_id`` defaults to the entry."""
        name = f"{Stack.of(self).stack_name}-{entry}" + ("" if subject is None else f"-{subject}")
        alarm = metric.create_alarm(
            self,
            construct_id or entry,
            alarm_name=name,
            alarm_description=f"{description} Runbook: {RUNBOOK}#{entry.lower()}",
            threshold=threshold,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=evaluation_periods,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(actions.SnsAction(self.alarm_topic))
        self.alarms.append(alarm)


def _graph(title: str, metrics: Sequence[cloudwatch.IMetric]) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(title=title, left=list(metrics), width=8)


def _custom(
    name: str, statistic: str, *, period: Duration = PERIOD, model: str | None = None
) -> cloudwatch.Metric:
    """A metric the functions write (EMF): without a model, what they write with the service
    alone; with one, what they write for that model."""
    dimensions = SERVICE if model is None else {**SERVICE, "model": model}
    return cloudwatch.Metric(
        namespace=NAMESPACE, metric_name=name, dimensions_map=dimensions, statistic=statistic, period=period
    )


def _per_model(name: str, statistic: str) -> cloudwatch.MathExpression:
    """One line per model of a metric the functions write (a search, so new models show)."""
    return cloudwatch.MathExpression(
        expression=f"SEARCH('{{{NAMESPACE},model,service}} MetricName=\"{name}\"', "
        f"'{statistic}', {int(PERIOD.to_seconds())})",
        label="",
        period=PERIOD,
    )


def _per_source(name: str, statistic: str) -> cloudwatch.MathExpression:
    """One line per source (batch, background, flex) of a metric the worker writes per source
    across models, labelled with the metric, the statistic and the source."""
    return cloudwatch.MathExpression(
        expression=f"SEARCH('{{{NAMESPACE},service,source}} MetricName=\"{name}\"', "
        f"'{statistic}', {int(PERIOD.to_seconds())})",
        label=f"{name} {statistic} ${{PROP('Dim.source')}}",
        period=PERIOD,
    )
