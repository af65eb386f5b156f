"""The operator's runbook (``docs/operate/runbook.md``) against the synthesized stack: one
entry per alarm and one alarm per entry, each alarm named after its entry and pointing at it,
each entry in three parts."""

from __future__ import annotations

import re
from typing import Any

import pytest

from infra.constructs import REPO_ROOT
from infra.constructs.observability import RUNBOOK
from tests.infra.synth import Synth

ALARM_TYPES = ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm")
PARTS = ("**What it means.**", "**What to look at.**", "**What to do.**")
# An entry is a one-word heading, so its anchor (mkdocs' and GitHub's) is the word lowercased.
ENTRY = re.compile(r"[A-Za-z0-9]+")
# How an alarm's description ends: the address of its entry.
POINTER = re.compile(rf"Runbook: {re.escape(RUNBOOK)}#(\S+)$")
# A resource the runbook's commands find by its logical id.
LOOKUP = re.compile(r"\$\(phys (\w+)\)")


def runbook_entries() -> list[tuple[str, str]]:
    """The alarm entries, in order: each ``### <Entry>`` of the ``## Alarms`` section, with
    its text up to the next entry."""
    text = (REPO_ROOT / RUNBOOK).read_text()
    _, found, section = text.partition("\n## Alarms\n")
    assert found, f"{RUNBOOK} has no '## Alarms' section"
    section = re.split(r"^## ", section, flags=re.M)[0]
    pieces = re.split(r"^### (.*)$", section, flags=re.M)
    return [(heading.strip(), body) for heading, body in zip(pieces[1::2], pieces[2::2], strict=True)]


@pytest.fixture(scope="module")
def alarms(synth: Synth) -> dict[str, dict[str, Any]]:
    """Every alarm of the template (metric and composite) by its logical id: its properties."""
    found: dict[str, dict[str, Any]] = {}
    for kind in ALARM_TYPES:
        found.update(
            {
                logical_id: alarm["Properties"]
                for logical_id, alarm in synth.template.find_resources(kind).items()
            }
        )
    assert found, "the stack makes no alarm"
    return found


def entry_of(synth: Synth, logical_id: str, alarm: dict[str, Any]) -> str:
    """The entry an alarm is named after: ``<stack>-<Entry>``, or ``<stack>-<Entry>-<subject>``
    for one of several alarms sharing an entry (one per model)."""
    name = alarm.get("AlarmName")
    prefix = f"{synth.stack.stack_name}-"
    assert isinstance(name, str) and name.startswith(prefix), (
        f"alarm {logical_id} is not named {prefix}<Entry>: {name!r}"
    )
    return name.removeprefix(prefix).split("-", 1)[0]


def metric_names(alarm: dict[str, Any]) -> set[str]:
    """The metrics an alarm watches (none for a composite alarm)."""
    names = {alarm["MetricName"]} if "MetricName" in alarm else set()
    return names | {
        m["MetricStat"]["Metric"]["MetricName"] for m in alarm.get("Metrics", []) if "MetricStat" in m
    }


def test_every_alarm_has_one_runbook_entry_and_every_entry_an_alarm(
    synth: Synth, alarms: dict[str, dict[str, Any]]
) -> None:
    headings = [heading for heading, _ in runbook_entries()]
    assert not [h for h in headings if not ENTRY.fullmatch(h)], f"{RUNBOOK}: an entry's heading is one word"
    twice = sorted({h for h in headings if headings.count(h) > 1})
    assert not twice, f"{RUNBOOK} has more than one entry for {twice}"
    wanted = {entry_of(synth, logical_id, alarm) for logical_id, alarm in alarms.items()}
    missing, extra = sorted(wanted - set(headings)), sorted(set(headings) - wanted)
    assert not missing and not extra, (
        f"{RUNBOOK}: alarms without an entry: {missing}; entries without an alarm: {extra}"
    )


def test_each_alarm_has_a_name_of_its_own_and_points_at_its_entry(
    synth: Synth, alarms: dict[str, dict[str, Any]]
) -> None:
    names = [alarm["AlarmName"] for alarm in alarms.values()]
    assert len(set(names)) == len(names), "alarm names are unique in an account and region"
    for logical_id, alarm in alarms.items():
        pointer = POINTER.search(alarm.get("AlarmDescription", ""))
        assert pointer, f"alarm {logical_id}'s description does not end with 'Runbook: {RUNBOOK}#<entry>'"
        assert pointer.group(1) == entry_of(synth, logical_id, alarm).lower()


def test_each_entry_says_what_it_means_what_to_look_at_and_what_to_do(
    synth: Synth, alarms: dict[str, dict[str, Any]]
) -> None:
    watched: dict[str, set[str]] = {}
    for logical_id, alarm in alarms.items():
        watched.setdefault(entry_of(synth, logical_id, alarm), set()).update(metric_names(alarm))
    for heading, body in runbook_entries():
        at = [body.find(part) for part in PARTS]
        assert all(body.count(part) == 1 for part in PARTS) and at == sorted(at), (
            f"{RUNBOOK}#{heading.lower()} has {', '.join(PARTS)} once each, in that order"
        )
        missing = sorted(m for m in watched.get(heading, set()) if f"`{m}`" not in body)
        assert not missing, f"{RUNBOOK}#{heading.lower()} does not name the metric it watches: {missing}"


def test_the_resources_the_runbook_looks_up_are_in_the_stack(synth: Synth) -> None:
    looked_up = set(LOOKUP.findall((REPO_ROOT / RUNBOOK).read_text()))
    assert looked_up, f"{RUNBOOK} looks up no resource by its logical id"
    assert not looked_up - set(synth.resources), (
        f"not in the stack: {sorted(looked_up - set(synth.resources))}"
    )
