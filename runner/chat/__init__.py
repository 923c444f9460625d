"""Chat front ends: a thread's runs as the streams chat UIs read
(runner/chat/uistream.py: the Vercel AI SDK's UI message stream)."""
