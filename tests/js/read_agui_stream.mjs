// Reads a thread's AG-UI stream (runner/chat/agui.py) with AG-UI's own client
// code, and prints {"events": [...], "messages": [...]} as JSON on stdout.
//
//   node read_agui_stream.mjs URL
//
// @ag-ui/client parses the SSE (runHttpRequest, transformHttpEventStream),
// then its agent's pipeline checks each event against the protocol's schema
// and order (transformChunks, verifyEvents) and applies them to the
// messages (defaultApplyEvents).
import { AbstractAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";

const [url] = process.argv.slice(2);
const events = [];

class ThreadStream extends AbstractAgent {
  run() {
    const http = runHttpRequest(() => fetch(url, { headers: { Accept: "text/event-stream" } }));
    return transformHttpEventStream(http);
  }
}

const agent = new ThreadStream({ threadId: "thread" });
await agent.runAgent({}, { onEvent: ({ event }) => void events.push(event) });
process.stdout.write(JSON.stringify({ events, messages: agent.messages }));
