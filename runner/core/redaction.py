"""Redaction (docs/security.md, "Redaction"): what is taken out of a run's
data on its way to people and other systems.

A :class:`Redactor` replaces what its patterns match with a marker
(``[redacted:email]``), then hands each string to its functions, if it has
any. The model is sent the real values and the journal keeps them: redaction
applies only where data leaves for others (log lines, spans, the public event
stream, a notifier's request).

The built-in patterns (:data:`BUILTINS`) are switched on by name, for the
project with ``RUNWRIGHT_REDACT`` and for an agent with ``Agent(redact=...)``:

- ``email``: e-mail addresses;
- ``card``: payment card numbers, 13 to 19 digits, in groups or not, that
  start as cards do (2 to 6) and pass the Luhn check, so that an order id
  or a timestamp of as many digits stays;
- ``api_key``: provider keys of known shapes (``sk-...``, ``sk_live_...``,
  ``ghp_...``, ``github_pat_...``, ``AKIA...``, ``AIza...``, ``xoxb-...``,
  ``hf_...``, ``glpat-...``);
- ``bearer``: the token of ``Bearer <token>`` (an ``Authorization`` header's).

Patterns are written here rather than taken from a library: no well-kept
package does this on JSON values without bringing a language model or a
service along, and each pattern starts only where a match may start, so a
long string costs one pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runner.core.errors import InvalidInput

# What a failing function leaves of a string (a redactor fails closed), and
# what a match of a regex without a name becomes.
FAILED = "[redacted]"


def marker(name: str) -> str:
    """What a match of the pattern ``name`` is replaced with (a regex given
    alone has no name)."""
    return f"[redacted:{name}]" if name else FAILED


def luhn(digits: str) -> bool:
    """True if ``digits`` pass the Luhn check of card numbers."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _card(found: re.Match[str]) -> bool:
    return luhn(re.sub(r"[ -]", "", found.group(0)))


@dataclass(frozen=True)
class Pattern:
    """A pattern and the name its marker carries. A match's ``keep`` group,
    if the pattern has one, stays (``Bearer `` before the token); ``check``,
    if given, must pass for a match to be replaced."""

    name: str
    regex: re.Pattern[str]
    check: Callable[[re.Match[str]], bool] | None = None

    def sub(self, text: str) -> str:
        return self.regex.sub(self._replace, text)

    def _replace(self, found: re.Match[str]) -> str:
        if self.check is not None and not self.check(found):
            return found.group(0)
        kept = found.groupdict().get("keep") or ""
        return kept + marker(self.name)


_KEY_CHARS = r"[A-Za-z0-9_-]"
_TOKEN_CHARS = r"[A-Za-z0-9\-._~+/]"  # RFC 6750's b64token

BUILTINS: Mapping[str, Pattern] = {
    "email": Pattern(
        "email",
        re.compile(
            r"(?<![\w.%+-])[\w.%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
            r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}(?![\w-])"
        ),
    ),
    "card": Pattern(
        "card",
        re.compile(r"(?<!\d)(?<!\d[ -])[2-6](?:[ -]?\d){12,18}(?![ -]?\d)"),
        _card,
    ),
    "api_key": Pattern(
        "api_key",
        re.compile(
            rf"(?<!{_KEY_CHARS})(?:"
            rf"sk-{_KEY_CHARS}{{20,}}"  # OpenAI (sk-proj-...), Anthropic (sk-ant-...)
            r"|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe
            r"|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_\w{22,}"  # GitHub
            r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
            r"|AIza[0-9A-Za-z_-]{35}"  # Google
            r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
            r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
            r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
            rf")(?!{_KEY_CHARS})"
        ),
    ),
    "bearer": Pattern(
        "bearer",
        # A token of letters alone must be long: "bearer instruments" stays.
        re.compile(
            rf"(?P<keep>\b[Bb]earer\s+)"
            rf"(?:(?={_TOKEN_CHARS}*[0-9\-._~+/]){_TOKEN_CHARS}{{8,}}|{_TOKEN_CHARS}{{20,}})=*"
        ),
    ),
}


class Redactor:
    """Takes patterns' matches (and whatever its functions take) out of text
    and JSON-like values. Built from any of: a built-in pattern's name
    (:data:`BUILTINS`), a compiled regex (its matches become
    ``[redacted]``), a function from a string to a string, another
    Redactor, or ``patterns``: names and regexes of your own
    (``{"employee": r"E\\d{6}"}``, marked ``[redacted:employee]``).

    Bad input is one :class:`InvalidInput`: an unknown name, a regex that
    does not compile, anything else."""

    def __init__(
        self, *using: RedactSpec, patterns: Mapping[str, str | re.Pattern[str]] | None = None
    ) -> None:
        found: list[Pattern] = []
        functions: list[Callable[[str], str]] = []
        for item in using:
            if isinstance(item, Redactor):
                found += item.patterns
                functions += item.functions
            elif isinstance(item, str):
                found.append(_builtin(item))
            elif isinstance(item, re.Pattern):
                if not isinstance(item.pattern, str):
                    raise InvalidInput("a redaction regex must match text, not bytes")
                found.append(Pattern("", item))
            elif callable(item):
                functions.append(item)
            else:
                raise InvalidInput(
                    "redact takes built-in pattern names ("
                    + ", ".join(BUILTINS)
                    + f"), compiled regexes, a function of a string or a Redactor, not {item!r:.60}"
                )
        for name, regex in (patterns or {}).items():
            if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,39}", name):
                raise InvalidInput(
                    f"a redaction pattern's name is lowercase letters, digits and _, "
                    f"not {name!r:.60}"
                )
            found.append(Pattern(name, _compiled(name, regex)))
        unique: dict[tuple[str, str], Pattern] = {}
        for pattern in found:
            unique.setdefault((pattern.name, pattern.regex.pattern), pattern)
        self.patterns: tuple[Pattern, ...] = tuple(unique.values())
        self.functions: tuple[Callable[[str], str], ...] = tuple(dict.fromkeys(functions))

    @classmethod
    def of(cls, spec: Any) -> Redactor:
        """A Redactor from what ``Agent(redact=...)`` takes: None (none), a
        Redactor, one name, regex or function, or a list of them."""
        if spec is None:
            return cls()
        if isinstance(spec, Redactor):
            return spec
        if isinstance(spec, str | re.Pattern) or callable(spec):
            return cls(spec)
        if isinstance(spec, Iterable) and not isinstance(spec, Mapping | bytes):
            return cls(*spec)
        raise InvalidInput(
            "redact takes built-in pattern names, compiled regexes, a function of a string "
            f"or a Redactor, not {spec!r:.60}"
        )

    def __bool__(self) -> bool:
        return bool(self.patterns or self.functions)

    def __add__(self, other: Redactor) -> Redactor:
        return Redactor(self, other)

    def __repr__(self) -> str:
        names = [p.name or p.regex.pattern for p in self.patterns]
        names += [getattr(f, "__name__", repr(f)) for f in self.functions]
        return f"Redactor({', '.join(names)})"

    @property
    def names(self) -> tuple[str, ...]:
        """The names of its patterns (a regex given alone has none)."""
        return tuple(p.name for p in self.patterns if p.name)

    def text(self, text: str) -> str:
        """``text`` with every match replaced by its marker."""
        for pattern in self.patterns:
            text = pattern.sub(text)
        for function in self.functions:
            try:
                changed = function(text)
            except Exception:
                return FAILED
            if not isinstance(changed, str):
                return FAILED
            text = changed
        return text

    def redact(self, value: Any) -> Any:
        """A copy of a JSON-like ``value`` (dicts, lists, tuples, strings and
        scalars) with every string redacted, keys too; ``value`` itself is
        never changed. Anything else is kept as it is."""
        if not self:
            return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {
                (self.text(k) if isinstance(k, str) else k): self._walk(v) for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self._walk(item) for item in value]
        return value


RedactSpec = str | re.Pattern[str] | Callable[[str], str] | Redactor
NONE = Redactor()


def builtin_names(names: Iterable[str], what: str) -> tuple[str, ...]:
    """``names`` checked against :data:`BUILTINS` (``what`` names the setting)."""
    names = tuple(names)
    unknown = [name for name in names if name not in BUILTINS]
    if unknown:
        raise InvalidInput(
            f"{what}: no built-in redaction pattern named {unknown[0]!r:.40} "
            f"(known: {', '.join(BUILTINS)})"
        )
    return names


def _builtin(name: str) -> Pattern:
    try:
        return BUILTINS[name]
    except KeyError:
        raise InvalidInput(
            f"no built-in redaction pattern named {name!r:.40} (known: {', '.join(BUILTINS)}); "
            "give a pattern of your own as re.compile(...) or Redactor(patterns={name: regex})"
        ) from None


def _compiled(name: str, regex: str | re.Pattern[str]) -> re.Pattern[str]:
    if isinstance(regex, re.Pattern) and isinstance(regex.pattern, str):
        return regex
    if not isinstance(regex, str):
        raise InvalidInput(f"the redaction pattern {name!r} must be a regex, not {regex!r:.60}")
    try:
        return re.compile(regex)
    except re.error as exc:
        raise InvalidInput(f"the redaction pattern {name!r} does not compile: {exc}") from None
