"""A statement's ``:name`` parameters are found outside the SQL's text only
(issue 50, item 3): a ``:word`` inside a string literal, a quoted name, a
dollar-quoted body or a comment is SQL's own text (it was made a parameter,
so a JSON literal such as '{"a":1}' turned into a parameter named 1)."""

from __future__ import annotations

from store.statements import Statement


def test_parameters_are_found_outside_literals_names_and_comments_only() -> None:
    sql = (
        "SELECT ':not_a_param', CAST('{\"a\":1}' AS json), $$ :nor $$, $f$ :x $f$,"
        " \"a:b\", :yes, 'it'':s', x::int -- :no\n/* :c */, :yes, :other"
    )
    statement = Statement("literal_test", sql)
    assert statement.params == ["yes", "other"]
    assert statement.numbered == sql.replace(":yes", "$1").replace(":other", "$2")
    assert statement.pyformat == sql.replace(":yes", "%(yes)s").replace(":other", "%(other)s")
    assert statement.args({"yes": 1, "other": 2}) == [1, 2]


def test_a_percent_sign_is_doubled_for_the_driver_wherever_it_is() -> None:
    statement = Statement("percent_test", "SELECT '100%', :n % 7")
    assert statement.pyformat == "SELECT '100%%', %(n)s %% 7"
    assert statement.numbered == "SELECT '100%', $1 % 7"
