"""A strict reader of ``text/event-stream`` bodies, for the SSE tests: it
parses what a browser's EventSource would, and refuses any line that is not a
field runner/sse.py writes, so a frame that broke its format fails the test."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

FIELDS = ("id", "event", "data", "retry")


@dataclass
class Frame:
    fields: list[tuple[str, str]] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)

    def get(self, name: str) -> str | None:
        values = [value for key, value in self.fields if key == name]
        assert len(values) <= 1, f"{name} given twice in one frame: {self.fields}"
        return values[0] if values else None

    @property
    def event(self) -> str | None:
        return self.get("event")

    @property
    def id(self) -> int | None:
        value = self.get("id")
        return None if value is None else int(value)

    @property
    def data(self) -> Any:
        value = self.get("data")
        return None if value is None else json.loads(value)

    @property
    def retry(self) -> int | None:
        value = self.get("retry")
        return None if value is None else int(value)


class FrameReader:
    """Feed it lines (with or without their newline); it returns each frame
    when the blank line that ends it arrives."""

    def __init__(self) -> None:
        self.frame = Frame()

    def feed(self, line: str) -> Frame | None:
        assert "\r" not in line, f"a stray carriage return: {line!r}"
        line = line.removesuffix("\n")
        assert "\n" not in line
        if line == "":
            done, self.frame = self.frame, Frame()
            assert done.fields or done.comments, "an empty frame"
            return done
        if line.startswith(":"):
            self.frame.comments.append(line[1:].strip())
            return None
        name, colon, value = line.partition(": ")
        assert colon and name in FIELDS, f"not a field of ours: {line!r}"
        self.frame.fields.append((name, value))
        return None


def parse(body: bytes) -> list[Frame]:
    """Every frame of a complete body, which must end with a complete frame."""
    reader = FrameReader()
    frames = [f for line in body.decode().split("\n")[:-1] if (f := reader.feed(line))]
    assert body.endswith(b"\n\n") and not reader.frame.fields, "the body ends mid-frame"
    return frames


def durable(frames: list[Frame]) -> list[tuple[int, str]]:
    """(id, type) of the frames with an id: the run's durable events."""
    return [(f.id, str(f.event)) for f in frames if f.id is not None]
