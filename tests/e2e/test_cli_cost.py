"""Cost in ``runwright runs`` and ``runwright show`` (issue 13), through the
real entry point: a run of a priced model shows what it cost, in total and per
model step; a free one $0.0000 in ``show``, and in ``runs``, which cannot
tell it from an unpriced one, "—". Unpriced models: tests/e2e/test_cli_honest.py."""

from __future__ import annotations

import re

import pytest

from runner import Agent, Engine, tool
from runner.core.costs import money
from runner.testing import ScriptedModel, call, text, tools
from store.models import RunStatus
from tests.e2e.clirun import rw

USAGE = (1000, 500)  # at 1e-5 and 2e-5 USD per token: 0.02 USD a step


@tool
def weigh(parcel: str) -> str:
    """Weigh a parcel."""
    return f"{parcel}: 2 kg"


priced = ScriptedModel(
    "cli-cost-priced",
    [tools(call("weigh", {"parcel": "p1"}), usage=USAGE), text("2 kg", usage=(300, 40))],
    price=(0.000_01, 0.000_02),
)
Agent(name="cli-cost-priced", model=priced.model, tools=[weigh])
free = ScriptedModel("cli-cost-free", [text("nothing to pay", usage=USAGE)])
Agent(name="cli-cost-free", model=free.model)


def table(output: str) -> list[list[str]]:
    """The cells of each row (the header's too) of a table ``runwright runs`` printed."""
    return [
        [cell.strip() for cell in re.split("[│┃]", line.strip("│┃ "))]
        for line in output.splitlines()
        if line[:1] in ("│", "┃")
    ]


def test_runs_and_show_display_the_cost(cli_env: dict[str, str], engine: Engine) -> None:
    paid = engine.start("cli-cost-priced")
    unpaid = engine.start("cli-cost-free")
    for run in (paid, unpaid):
        done = engine.execute(run.id)
        assert done is not None and done.status is RunStatus.COMPLETED
    # 0.02 for step 1; 300 * 1e-5 + 40 * 2e-5 = 0.0038 for step 2.
    assert engine.get_run(paid.id).cost_usd == pytest.approx(0.0238)

    listing = rw(cli_env, "runs").stdout
    rows = {cells[0]: cells for cells in table(listing)}
    assert rows["run"][4:7] == ["tokens", "cost", "created"]
    assert rows[paid.id][4:6] == ["1840", "$0.0238"]
    # A free model is priced at 0: the list reads the run's mark, as show reads its steps.
    assert rows[unpaid.id][4:6] == ["1500", "$0.0000"]

    shown = rw(cli_env, "show", paid.id).stdout
    assert "cost     $0.0238" in shown
    assert re.search(r"step +1  llm   calls weigh \[1000\+500 tokens, \$0\.0200\]", shown), shown
    assert re.search(r"step +2  llm   '2 kg' \[300\+40 tokens, \$0\.0038\]", shown), shown

    shown = rw(cli_env, "show", unpaid.id).stdout
    assert "cost     $0.0000" in shown
    assert "[1000+500 tokens]" in shown  # a free step names no cost


@pytest.mark.parametrize(
    ("usd", "shown"),
    [
        (None, "—"),
        (float("nan"), "—"),
        (0.0, "$0.0000"),
        (0.00004, "<$0.0001"),
        (0.0001, "$0.0001"),
        (12.3456789, "$12.3457"),
        (1234.5, "$1,234.50"),  # from $100 on, to the cent, as the console showed it
        (-1.0, "—"),
    ],
)
def test_a_cost_reads_in_dollars_to_a_hundredth_of_a_cent(usd: float | None, shown: str) -> None:
    assert money(usd) == shown
