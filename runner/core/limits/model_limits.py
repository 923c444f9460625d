"""Model limits: what a provider allows a model deployment, declared in code
(:func:`register`) or in ``RUNWRIGHT_MODEL_LIMITS``, and which declaration a
model name falls under.

A declaration's pattern is an exact model name (``"openai/gpt-4o-mini"``), a
prefix that ends in ``*`` (``"anthropic/*"``), or ``"*"`` for every model. The
most specific wins: the exact name, then the longest prefix, then ``"*"``. A
pattern gives each model it matches that limit; whether the models under one
prefix share one budget is the caller's choice of key (:mod:`.limiter` takes
any key).

Where code and the environment declare the same pattern, the environment
wins, the whole declaration: a limit is a fact of the provider account, which
the operator knows and may change without a release.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

from store.errors import ConfigurationError

ENV_VARIABLE = "RUNWRIGHT_MODEL_LIMITS"
WILDCARD = "*"


class LimitError(ConfigurationError, ValueError):
    """A model limit is not valid."""


@dataclass(frozen=True)
class ModelLimit:
    """What one model deployment allows: requests per minute, tokens per
    minute (input and output together), and calls in flight at once. Each
    given value is a positive whole number; at least one is given."""

    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None

    def __post_init__(self) -> None:
        for item in fields(self):
            _check_count(item.name, getattr(self, item.name))
        if self.rpm is None and self.tpm is None and self.max_concurrent is None:
            raise LimitError("a model limit needs at least one of rpm, tpm and max_concurrent")


def _check_count(name: str, value: object, where: str = "") -> None:
    if value is None:
        return
    # bool is an int to Python, never a count to a reader.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LimitError(f"{where}{name} must be a positive whole number, not {value!r:.40}")


def check_pattern(pattern: object) -> str:
    """``pattern`` if it is an exact model name, a prefix ending in ``*``, or
    ``"*"``; else :class:`LimitError` saying why."""
    if not isinstance(pattern, str) or not pattern:
        raise LimitError(f"a model limit's pattern must be a non-empty string, not {pattern!r:.40}")
    if any(char.isspace() for char in pattern):
        raise LimitError(f"model limit pattern {pattern!r:.60} holds a space")
    if WILDCARD in pattern[:-1]:
        raise LimitError(
            f"model limit pattern {pattern!r:.60} has a * before its end: a pattern is a model "
            'name, a prefix ending in * ("anthropic/*"), or "*"'
        )
    return pattern


def _specificity(pattern: str) -> tuple[int, int]:
    """Sorts the most specific pattern first: exact names, then longer prefixes."""
    exact = not pattern.endswith(WILDCARD)
    return (1 if exact else 0, len(pattern))


class ModelLimits:
    """Model limits by pattern. :meth:`for_model` finds a model's."""

    def __init__(self, limits: Mapping[str, ModelLimit] | None = None) -> None:
        self._limits: dict[str, ModelLimit] = {}
        self._lock = threading.Lock()
        for pattern, limit in (limits or {}).items():
            self.register(pattern, limit)

    def register(self, pattern: str, limit: ModelLimit, *, replace: bool = False) -> None:
        """Declare ``limit`` for the models ``pattern`` matches. Another limit
        already there for that pattern raises :class:`LimitError` unless
        ``replace``: two modules declaring one deployment differently is a
        mistake to see, not to resolve silently."""
        check_pattern(pattern)
        if not isinstance(limit, ModelLimit):
            raise LimitError(f"the limit of {pattern!r} must be a ModelLimit, not {limit!r:.60}")
        with self._lock:
            found = self._limits.get(pattern)
            if found is not None and found != limit and not replace:
                raise LimitError(
                    f"model limit pattern {pattern!r} is declared already as {found}; "
                    "pass replace=True to replace it on purpose"
                )
            self._limits[pattern] = limit

    def for_model(self, model: str) -> tuple[str, ModelLimit] | None:
        """The pattern and limit that govern ``model``, the most specific
        first; None if no pattern matches it."""
        with self._lock:
            found = self._limits.get(model)
            if found is not None:
                return model, found
            for pattern in sorted(self._limits, key=_specificity, reverse=True):
                if pattern.endswith(WILDCARD) and model.startswith(pattern[:-1]):
                    return pattern, self._limits[pattern]
        return None

    def overlaid(self, other: ModelLimits) -> ModelLimits:
        """These limits with ``other``'s patterns replacing theirs."""
        merged = ModelLimits(dict(self.items()))
        for pattern, limit in other.items():
            merged.register(pattern, limit, replace=True)
        return merged

    def items(self) -> Iterator[tuple[str, ModelLimit]]:
        with self._lock:
            snapshot = sorted(self._limits.items())
        return iter(snapshot)

    def __len__(self) -> int:
        return len(self._limits)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ModelLimits):
            return NotImplemented
        return dict(self.items()) == dict(other.items())

    def __repr__(self) -> str:
        return f"ModelLimits({dict(self.items())!r})"

    @classmethod
    def from_json(cls, text: str, *, source: str = ENV_VARIABLE) -> ModelLimits:
        """Parse ``{"pattern": {"rpm": .., "tpm": .., "max_concurrent": ..}, ..}``;
        anything else is one :class:`LimitError` naming ``source`` and the key."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise LimitError(f"{source} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise LimitError(
                f"{source} must be a JSON object of patterns to limits, "
                f'e.g. {{"openai/gpt-4o-mini": {{"rpm": 500}}}}, not {type(data).__name__}'
            )
        known = [item.name for item in fields(ModelLimit)]
        parsed = cls()
        for pattern, spec in data.items():
            where = f"{source}[{pattern!r}]: "
            try:
                check_pattern(pattern)
            except LimitError as exc:
                raise LimitError(f"{source}: {exc}") from None
            if not isinstance(spec, dict):
                raise LimitError(
                    f'{where}must be an object such as {{"rpm": 500}}, not {spec!r:.40}'
                )
            unknown = sorted(set(spec) - set(known))
            if unknown:
                raise LimitError(f"{where}unknown field {unknown[0]!r} (known: {', '.join(known)})")
            values: dict[str, Any] = {}
            for name in known:
                _check_count(name, spec.get(name), where)
                values[name] = spec.get(name)
            try:
                limit = ModelLimit(**values)
            except LimitError as exc:
                raise LimitError(f"{where}{exc}") from None
            parsed.register(pattern, limit)
        return parsed


limits = ModelLimits()
"""The limits declared in code, by :func:`register`."""


def register(pattern: str, limit: ModelLimit, *, replace: bool = False) -> None:
    """Declare ``limit`` for the models ``pattern`` matches, for this process
    (see :meth:`ModelLimits.register`)."""
    limits.register(pattern, limit, replace=replace)


def configured(env_json: str | None) -> ModelLimits:
    """The limits in force: those declared in code, with the patterns of
    ``env_json`` (``RUNWRIGHT_MODEL_LIMITS``, as ``Settings.model_limits``
    holds it) replacing theirs."""
    if env_json is None:
        return limits.overlaid(ModelLimits())
    return limits.overlaid(ModelLimits.from_json(env_json))


def tenant_weights(text: str | None) -> dict[str, int]:
    """``RUNWRIGHT_TENANT_WEIGHTS``: how many turns a round each named tenant
    takes under a contended limit (others take 1), as JSON ``{"acme": 2}``.
    Anything else is one clear error naming the variable."""
    if text is None:
        return {}
    try:
        found = json.loads(text)
    except ValueError as exc:
        raise LimitError(f"RUNWRIGHT_TENANT_WEIGHTS is not JSON: {exc}") from None
    if not isinstance(found, dict):
        raise LimitError("RUNWRIGHT_TENANT_WEIGHTS must be a JSON object of tenant: turns")
    for tenant, weight in found.items():
        if not tenant or isinstance(weight, bool) or not isinstance(weight, int):
            raise LimitError(
                f"RUNWRIGHT_TENANT_WEIGHTS: tenant {tenant!r} needs a whole number of turns, "
                f"not {weight!r:.40}"
            )
        if not 1 <= weight <= 1000:
            raise LimitError(
                f"RUNWRIGHT_TENANT_WEIGHTS: tenant {tenant!r} takes 1 to 1000 turns, not {weight}"
            )
    return found
