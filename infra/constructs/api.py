"""The HTTP API: ``/admin/...`` goes to the admin function, a POST to an interactive path to the
interactive function, every other path and method to the api function (payload format 2.0)."""

from __future__ import annotations

import json

import jsii
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk.aws_apigatewayv2_integrations import HttpLambdaIntegration
from batchgw.config import resources
from constructs import Construct

from infra.constructs import acknowledge

LOG_RETENTION = logs.RetentionDays.ONE_MONTH
# Account-wide defaults for every route; a gateway in front of this one may be stricter.
THROTTLE_RATE_LIMIT = 100  # requests per second, steady
THROTTLE_BURST_LIMIT = 200

# HTTP API ($context variables of HTTP APIs, not REST APIs), one JSON object a line.
ACCESS_LOG_FORMAT = {
    "requestId": "$context.requestId",
    "ip": "$context.identity.sourceIp",
    "userAgent": "$context.identity.userAgent",
    "requestTime": "$context.requestTime",
    "httpMethod": "$context.httpMethod",
    "path": "$context.path",
    "routeKey": "$context.routeKey",
    "status": "$context.status",
    "protocol": "$context.protocol",
    "responseLength": "$context.responseLength",
    "responseLatency": "$context.responseLatency",
    "integrationStatus": "$context.integrationStatus",
    "integrationLatency": "$context.integrationLatency",
    "integrationError": "$context.integrationErrorMessage",
    "error": "$context.error.message",
}


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLogSettings:
    def __init__(self, log_group: logs.ILogGroup) -> None:
        self._destination = apigwv2.LogGroupLogDestination(log_group)

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw.AccessLogFormat:
        return apigw.AccessLogFormat.custom(json.dumps(ACCESS_LOG_FORMAT))


class Api(Construct):
    """An HTTP API whose ``$default`` stage logs every request and throttles.

    The admin routes have a function of their own (``admin_handler``), so that the role of the
    function serving every other route cannot write users, keys or runtime settings; so do the
    interactive paths (``interactive_handler``), the only routes that call a model; API
    Gateway picks the most specific route, ``/admin/{proxy+}`` or ``POST /v1/embeddings`` over
    ``/{proxy+}``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: lambda_.IFunction,
        admin_handler: lambda_.IFunction,
        interactive_handler: lambda_.IFunction,
    ) -> None:
        super().__init__(scope, construct_id)
        self.http_api = apigwv2.HttpApi(
            self,
            "HttpApi",
            description="batchgw: the batch API (OpenAI and Anthropic shapes)",
            create_default_stage=False,
        )
        integration = HttpLambdaIntegration(
            "Handler", handler, payload_format_version=apigwv2.PayloadFormatVersion.VERSION_2_0
        )
        for path in ("/", "/{proxy+}"):
            self.http_api.add_routes(path=path, methods=[apigwv2.HttpMethod.ANY], integration=integration)
        admin = HttpLambdaIntegration(
            "AdminHandler", admin_handler, payload_format_version=apigwv2.PayloadFormatVersion.VERSION_2_0
        )
        self.http_api.add_routes(
            path=f"{resources.ADMIN_PATH_PREFIX}{{proxy+}}",
            methods=[apigwv2.HttpMethod.ANY],
            integration=admin,
        )
        interactive = HttpLambdaIntegration(
            "InteractiveHandler",
            interactive_handler,
            payload_format_version=apigwv2.PayloadFormatVersion.VERSION_2_0,
        )
        for path in resources.INTERACTIVE_PATHS:
            self.http_api.add_routes(path=path, methods=[apigwv2.HttpMethod.POST], integration=interactive)
        acknowledge(
            self.http_api,
            {
                "AwsSolutions-APIG4": (
                    "the api, admin and interactive functions authenticate every request themselves "
                    "(batchgw.api.auth): the OpenAI SDK's `Authorization: Bearer <key>` is looked up "
                    "among the hashed keys in DynamoDB, giving the caller's user and role; a missing, "
                    "unknown or revoked key gets 401 in the OpenAI error shape. An authorizer would "
                    "repeat that lookup in another function"
                )
            },
        )

        self.access_logs = logs.LogGroup(self, "AccessLogs", retention=LOG_RETENTION)
        self.stage = self.http_api.add_stage(
            "DefaultStage",
            stage_name="$default",
            auto_deploy=True,
            throttle=apigwv2.ThrottleSettings(
                rate_limit=THROTTLE_RATE_LIMIT, burst_limit=THROTTLE_BURST_LIMIT
            ),
            access_log_settings=_AccessLogSettings(self.access_logs),
        )

    @property
    def url(self) -> str:
        return self.stage.url
