"""The console's evaluations (docs/console.md, "Evaluations"), through the
Flask adapter: the list with each scorer's pass rate and a form that goes on
to a comparison, an evaluation's summary and cases, two evaluations compared
case by case with the changed cases first, and the JSON API of each; the
cases' payloads and reports masked for a viewer, with no view recorded, and
shown to a reader, with one; an id that names nothing is a 404, evaluations
of two dataset versions a 400, and a running evaluation shows its summary so
far. The evaluations are made through the store, with synthetic reports."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from flask.testing import FlaskClient

from runner import Engine
from runner.console.masking import MASK
from runner.core.audit import AuditAction
from runner.evals.evaluation import summary_of
from runner.evals.recording import Case
from runner.evals.summary import ScorerSummary
from tests.console.conftest import BASE, HOSTILE_SCRIPT, role_headers, unique

SECRET = "secret-"  # in every payload, output and judge's reason: what a viewer must not see
CASES = 12
# The verdicts of the scorer "output": the baseline passes 0-5, the new
# version 0-4 and 6-9 (better on 6, 7, 8 and 9; worse on 5).
BASELINE_PASSES = set(range(6))
NEW_PASSES = set(range(10)) - {5}
BETTER, WORSE = [6, 7, 8, 9], [5]


@pytest.fixture
def client(role_client: FlaskClient) -> FlaskClient:
    return role_client


headers = role_headers


def get(client: FlaskClient, path: str, role: str | None = None, status: int = 200) -> str:
    answer = client.get(path, headers=headers("vic" if role == "viewer" else "alice", role))
    body = answer.get_data(as_text=True)
    assert answer.status_code == status, body[-2000:]
    return body


@dataclass(frozen=True)
class Pair:
    """Two finished evaluations of one dataset version: ``new`` against ``baseline``."""

    dataset: str
    version: str
    new: str
    baseline: str


def dataset_of(engine: Engine, name: str, cases: int = CASES, tag: str = "") -> str:
    """A dataset of ``cases`` cases whose payloads carry :data:`SECRET`; its version."""
    made = [
        Case.from_json(
            {
                "agent": "triage",
                "payload": {"customer": f"{SECRET}{n}{tag}", "note": HOSTILE_SCRIPT},
            }
        ).to_json()
        for n in range(cases)
    ]
    return engine.store.save_dataset(name, made).version


def report(n: int, who: str) -> dict[str, Any]:
    """A replay report as runner/evals/replay.py writes it, cut to what the pages read."""
    return {
        "agent": "triage",
        "mode": "live",
        "replay": {"status": "completed", "output": f"{who} answers {SECRET}{n} {HOSTILE_SCRIPT}"},
        "original": {"status": "completed", "output": f"recorded {SECRET}{n}"},
        "divergence": {"step": 2, "reason": f"called refund for {SECRET}{n}"} if n % 3 else None,
        "would_have_run": [{"name": "refund", "arguments": {"to": f"{SECRET}{n}"}}]
        if n % 4 == 0
        else [],
        "wall_ms": 10.0 + n,
    }


def evaluate(
    engine: Engine,
    dataset: str,
    version: str,
    label: str,
    passes: set[int],
    *,
    baseline: str | None = None,
    cases: int = CASES,
    finish: int | None = None,
) -> str:
    """An evaluation whose cases are claimed and finished here, as a worker
    would (``finish``: only that many, and the evaluation left running);
    its id."""
    store = engine.store
    evaluation_id = unique(f"eval-{label}")
    store.create_evaluation(
        evaluation_id,
        dataset=dataset,
        version=version,
        agent="triage",
        label=label,
        case_count=cases,
        baseline=baseline,
        created_by="ci",
        options={"agent": "triage", "scorers": ["output", "completed"], "against": baseline},
    )
    for _ in range(cases if finish is None else finish):
        claimed = store.claim_eval_case(evaluation_id, "worker-1", 60)
        assert claimed is not None
        n = claimed.position
        passed = n in passes
        scores = {
            "output": {
                "passed": passed,
                "score": 1.0 if passed else 0.0,
                "detail": None if passed else f"the judge said {SECRET}{n} {HOSTILE_SCRIPT}",
            },
            # Not applied to case 10 by the new version: a "-".
            "completed": {"passed": None if (n == 10 and baseline) else n != 11, "score": None},
        }
        assert store.finish_eval_case(
            evaluation_id,
            n,
            "worker-1",
            result=report(n, label),
            scores=scores,
            duration_ms=1500.0 + n,
            cost_usd=0.001 * (n + 1),
            tokens=100 + n,
        )
    if finish is None:
        store.finish_evaluation(evaluation_id, summary_of(engine, store.evaluation(evaluation_id)))
    return evaluation_id


def two_evaluations(engine: Engine) -> Pair:
    dataset = unique("tickets")
    version = dataset_of(engine, dataset)
    baseline = evaluate(engine, dataset, version, "v1", BASELINE_PASSES)
    new = evaluate(engine, dataset, version, "v2", NEW_PASSES, baseline=baseline)
    return Pair(dataset, version, new, baseline)


def output_summary(engine: Engine, evaluation_id: str) -> ScorerSummary:
    saved = engine.store.evaluation(evaluation_id, cases=False).info.summary
    assert saved is not None
    [found] = [s for s in saved["scorers"] if s["name"] == "output"]
    return ScorerSummary(**{k: v for k, v in found.items() if k != "pass_rate"})


def interval_text(s: ScorerSummary) -> str:
    assert s.difference is not None and s.low is not None and s.high is not None
    return f"{s.difference:+.1%} [{s.low:+.1%}, {s.high:+.1%}]"


def payload_views(engine: Engine) -> list[dict[str, Any]]:
    return [
        dict(e.detail or {}) for e in engine.audit_log() if e.action == AuditAction.VIEWED_PAYLOADS
    ]


# ------------------------------------------------------------ the pages


def test_the_list_shows_each_evaluation_newest_first_and_its_form_goes_to_a_comparison(
    client: FlaskClient, engine: Engine
) -> None:
    pair = two_evaluations(engine)
    listing = get(client, f"{BASE}/evaluations")
    assert f'href="{BASE}/evaluations"' in listing  # the navigation's link
    assert listing.index(f'id="e-{pair.new}"') < listing.index(f'id="e-{pair.baseline}"')
    assert f"{pair.dataset}@{pair.version}" in listing
    assert f"output {len(NEW_PASSES)}/{CASES} (75%)" in listing
    assert f"output {len(BASELINE_PASSES)}/{CASES} (50%)" in listing
    assert f"{CASES}/{CASES}" in listing and "completed" in listing
    assert f'href="{BASE}/evaluations/{pair.new}/compare/{pair.baseline}"' in listing
    assert SECRET not in listing  # the list shows no payload: nothing to record
    assert payload_views(engine) == []

    chosen = client.get(
        f"{BASE}/evaluations?evaluation={pair.baseline}&against={pair.new}", headers=headers()
    )
    assert chosen.status_code == 303
    assert chosen.headers["Location"].endswith(
        f"{BASE}/evaluations/{pair.baseline}/compare/{pair.new}"
    )
    half = get(client, f"{BASE}/evaluations?evaluation={pair.new}", status=400)
    assert "pick two evaluations" in half
    other = get(client, f"{BASE}/evaluations?dataset=nothing-like-it")
    assert pair.new not in other and "No evaluations" in other


def test_an_evaluation_shows_its_summary_and_cases_and_its_view_is_recorded(
    client: FlaskClient, engine: Engine
) -> None:
    pair = two_evaluations(engine)
    page = get(client, f"{BASE}/evaluations/{pair.new}")
    assert interval_text(output_summary(engine, pair.new)) in page
    assert "Baseline pass rate" in page and "50%" in page and "75%" in page
    assert f'href="{BASE}/evaluations/{pair.new}/compare/{pair.baseline}"' in page
    case_6 = page.split('id="case-6"')[1].split("</tr>")[0]
    assert '<td class="mark pass"' in case_6 and f"{SECRET}6" in case_6
    assert "1506 ms" in case_6 and "$0.0070" in case_6 and ">106<" in case_6
    case_10 = page.split('id="case-10"')[1].split("</tr>")[0]
    assert '<td class="mark fail" title="the judge said secret-10' in case_10
    assert '<td class="mark">-</td>' in case_10
    assert "Would have run" in page and "Parted from the recording" in page
    assert HOSTILE_SCRIPT not in page and "&lt;script&gt;" in page  # escaped
    assert payload_views(engine) == [{"evaluation": pair.new}]
    get(client, f"{BASE}/evaluations/{pair.new}")  # again, as a polling page would
    assert payload_views(engine) == [{"evaluation": pair.new}]  # once a window


def test_a_comparison_shows_the_changed_cases_first_and_marked(
    client: FlaskClient, engine: Engine
) -> None:
    pair = two_evaluations(engine)
    page = get(client, f"{BASE}/evaluations/{pair.new}/compare/{pair.baseline}")
    assert f"Evaluation {pair.new} against {pair.baseline}" in page
    assert interval_text(output_summary(engine, pair.new)) in page
    assert f"{len(BETTER) + len(WORSE)} of {CASES} cases changed verdicts" in page
    order = [int(part.split('"')[0]) for part in page.split('<tr id="case-')[1:]]
    changed = sorted(BETTER + WORSE)
    assert order[: len(changed)] == changed  # the changed first, by position
    assert sorted(order[len(changed) :]) == order[len(changed) :]
    for n in BETTER:
        row = page.split(f'<tr id="case-{n}"')[1].split("</tr>")[0]
        assert row.startswith(' class="changed better"') and "better: output" in row
        assert '<td class="mark better pass"' in row
        assert f"v2 answers {SECRET}{n}" in row and f"v1 answers {SECRET}{n}" in row
    [worse] = WORSE
    row = page.split(f'<tr id="case-{worse}"')[1].split("</tr>")[0]
    assert row.startswith(' class="changed worse"') and "worse: output" in row
    assert payload_views(engine) == [{"evaluation": pair.new, "against": pair.baseline}]


def test_a_viewer_sees_the_cases_masked_and_no_view_is_recorded(
    client: FlaskClient, engine: Engine
) -> None:
    pair = two_evaluations(engine)
    paths = [
        f"{BASE}/evaluations/{pair.new}",
        f"{BASE}/evaluations/{pair.new}/compare/{pair.baseline}",
        f"{BASE}/api/evaluations/{pair.new}",
        f"{BASE}/api/evaluations/{pair.new}/compare/{pair.baseline}",
    ]
    for path in paths:
        shown = get(client, path, role="viewer")
        assert SECRET not in shown and MASK in shown, path
        assert "refund" not in shown  # a call that would have run is a payload too
    page = get(client, paths[0], role="viewer")
    assert interval_text(output_summary(engine, pair.new)) in page  # numbers stay
    assert '<td class="mark fail" title="[masked]">FAIL</td>' in page
    data = json.loads(get(client, paths[2], role="viewer"))
    assert data["cases"][0]["payload"] == {"customer": MASK, "note": MASK}
    assert data["cases"][10]["scores"]["output"] == {
        "passed": False,
        "score": 0.0,
        "detail": MASK,
    }
    assert payload_views(engine) == []
    # A reader's view of the same page is recorded.
    assert SECRET in get(client, paths[0], role="reader")
    assert payload_views(engine) == [{"evaluation": pair.new}]


# ------------------------------------------------------------ the JSON API


def test_the_json_api_lists_reads_and_compares(client: FlaskClient, engine: Engine) -> None:
    pair = two_evaluations(engine)
    listed = client.get(f"{BASE}/api/evaluations?dataset={pair.dataset}", headers=headers())
    assert listed.status_code == 200 and listed.content_type == "application/json"
    rows = listed.get_json()["evaluations"]
    assert [r["id"] for r in rows] == [pair.new, pair.baseline]
    assert rows[0]["baseline"] == pair.baseline and rows[0]["done"] == CASES
    assert payload_views(engine) == []

    one = client.get(f"{BASE}/api/evaluations/{pair.new}", headers=headers()).get_json()
    assert one["dataset_version"] == pair.version and one["status"] == "completed"
    assert [c["position"] for c in one["cases"]] == list(range(CASES))
    case = one["cases"][4]
    assert case["payload"]["customer"] == f"{SECRET}4"
    assert case["result"]["would_have_run"][0]["arguments"] == {"to": f"{SECRET}4"}
    assert case["scores"]["output"]["passed"] is True and case["tokens"] == 104
    [output] = [s for s in one["summary"]["scorers"] if s["name"] == "output"]
    assert output["pass_rate"] == len(NEW_PASSES) / CASES

    compared = client.get(
        f"{BASE}/api/evaluations/{pair.new}/compare/{pair.baseline}", headers=headers()
    ).get_json()
    assert (compared["first"], compared["second"]) == (pair.new, pair.baseline)
    better = [r["position"] for r in compared["rows"] if r["better"]]
    worse = [r["position"] for r in compared["rows"] if r["worse"]]
    assert (better, worse) == (BETTER, WORSE)
    row = compared["rows"][6]
    assert row["payload"]["customer"] == f"{SECRET}6"
    assert row["outputs"]["first"].startswith(f"v2 answers {SECRET}6")
    assert row["outputs"]["second"].startswith(f"v1 answers {SECRET}6")
    [output] = [s for s in compared["summary"] if s["name"] == "output"]
    assert output["difference"] == pytest.approx((len(BETTER) - len(WORSE)) / CASES)
    assert output["low"] is not None and output["high"] is not None
    assert payload_views(engine) == [
        {"evaluation": pair.new},
        {"evaluation": pair.new, "against": pair.baseline},
    ]


def test_an_unknown_evaluation_is_404_and_two_dataset_versions_are_400(
    client: FlaskClient, engine: Engine
) -> None:
    pair = two_evaluations(engine)
    elsewhere = dataset_of(engine, pair.dataset, tag="b")  # the dataset's next version
    assert elsewhere != pair.version
    other = evaluate(engine, pair.dataset, elsewhere, "v3", set())
    for path in (
        f"{BASE}/evaluations/no-such-evaluation",
        f"{BASE}/evaluations/-bad%20id%3Cb%3E",  # not an id at all
        f"{BASE}/evaluations/{pair.new}/compare/no-such-evaluation",
        f"{BASE}/evaluations/no-such-evaluation/compare/{pair.new}",
    ):
        page = get(client, path, status=404)
        assert "no evaluation with id" in page
        api = client.get(path.replace(f"{BASE}/", f"{BASE}/api/"), headers=headers())
        assert api.status_code == 404 and api.get_json()["error"] == "Not found"
    page = get(client, f"{BASE}/evaluations/{pair.new}/compare/{other}", status=400)
    assert f"ran version {pair.version}" in page and "compare evaluations of one version" in page
    api = client.get(f"{BASE}/api/evaluations/{pair.new}/compare/{other}", headers=headers())
    assert api.status_code == 400
    assert "compare evaluations of one version" in api.get_json()["message"]
    assert get(client, f"{BASE}/evaluations?limit=0", status=400)
    assert payload_views(engine) == []  # nothing was shown


def test_nobody_signed_in_gets_none_of_it(client: FlaskClient, engine: Engine) -> None:
    pair = two_evaluations(engine)
    for path in (f"{BASE}/evaluations/{pair.new}", f"{BASE}/api/evaluations"):
        answer = client.get(path)
        assert answer.status_code == 403 and SECRET not in answer.get_data(as_text=True)


def test_a_running_evaluation_shows_its_summary_so_far(client: FlaskClient, engine: Engine) -> None:
    dataset = unique("running")
    version = dataset_of(engine, dataset, cases=4)
    running = evaluate(engine, dataset, version, "v1", {0, 1}, cases=4, finish=3)
    page = get(client, f"{BASE}/evaluations/{running}")
    assert "So far: the 3 cases done" in page and "output" in page
    assert "2/3 (67%)" in page
    case_3 = page.split('id="case-3"')[1].split("</tr>")[0]
    assert "pending" in case_3
    listing = get(client, f"{BASE}/evaluations")
    assert "3/4" in listing and "running" in listing


def test_an_evaluation_whose_dataset_was_deleted_shows_without_payloads(
    client: FlaskClient, engine: Engine
) -> None:
    pair = two_evaluations(engine)
    assert engine.store.delete_dataset(pair.dataset) == 1
    page = get(client, f"{BASE}/evaluations/{pair.new}")
    assert "its payloads are gone" in page and "<th>Payload</th>" not in page
    assert f"v2 answers {SECRET}3" in page  # the reports stay with the evaluation
    compared = get(client, f"{BASE}/evaluations/{pair.new}/compare/{pair.baseline}")
    assert "its payloads are gone" in compared
    data = client.get(f"{BASE}/api/evaluations/{pair.new}", headers=headers()).get_json()
    assert data["cases"][0]["payload"] is None
