// Reads a thread's chat stream (runner/chat/uistream.py) with the AI SDK's
// own client code, and prints what it rebuilt as JSON on stdout:
// {"chunks": [...], "messages": [...], "cut_after": id or null}.
//
//   node read_chat_stream.mjs URL            one read, to the end, as it comes
//   node read_chat_stream.mjs URL --cut N    read N parts, drop the
//       connection, reconnect with Last-Event-ID: the id of the last one;
//       the SDK reads what the two connections carried, in order.
//
// The SDK parses the SSE (parseJsonEventStream), checks each part against
// its own schema (uiMessageChunkSchema), and rebuilds the UI messages
// (readUIMessageStream). This script only counts parts to know where to cut.
import { parseJsonEventStream, readUIMessageStream, uiMessageChunkSchema } from "ai";

const [url, flag, count] = process.argv.slice(2);
const HEADER = "x-vercel-ai-ui-message-stream";

async function connect(lastEventId) {
  const headers = { Accept: "text/event-stream" };
  if (lastEventId != null) headers["Last-Event-ID"] = lastEventId;
  const response = await fetch(url, { headers });
  if (response.status !== 200) throw new Error(`status ${response.status}`);
  if (response.headers.get(HEADER) !== "v1") throw new Error(`no ${HEADER}: v1 header`);
  return response;
}

// The first `limit` parts of one connection (then the connection is
// dropped), and the id of the last of them; the type of each part is written
// to stderr as it arrives (a test waits for one).
async function readParts(limit) {
  const reader = (await connect(null)).body.getReader();
  const decoder = new TextDecoder();
  const parts = [];
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`the stream ended after ${parts.length} parts`);
    text += decoder.decode(value, { stream: true });
    const events = text.split("\n\n");
    text = events.pop();
    for (const event of events) {
      if (!event.includes("data: ")) continue; // a keep-alive
      parts.push(event);
      process.stderr.write(`${JSON.parse(event.split("data: ")[1]).type}\n`);
      if (parts.length === limit) {
        await reader.cancel(); // the client goes away mid-stream
        const ids = parts.flatMap((e) => e.split("\n").filter((l) => l.startsWith("id: ")));
        return { text: parts.join("\n\n") + "\n\n", lastId: ids.at(-1).slice(4) };
      }
    }
  }
}

// The SDK's reading of a byte stream: each part checked against its schema,
// recorded, and its type written to stderr as it arrives (a test waits for
// one), then the messages rebuilt from them.
async function rebuild(bytes) {
  const chunks = [];
  const parsed = parseJsonEventStream({ stream: bytes, schema: uiMessageChunkSchema });
  const checked = parsed.pipeThrough(
    new TransformStream({
      transform(result, controller) {
        if (!result.success) throw result.error;
        chunks.push(result.value);
        process.stderr.write(`${result.value.type}\n`);
        controller.enqueue(result.value);
      },
    }),
  );
  const messages = new Map();
  let failure = null;
  const onError = (e) => (failure = e);
  const stream = readUIMessageStream({ stream: checked, onError, terminateOnError: true });
  for await (const message of stream) messages.set(message.id, message);
  if (failure) throw failure;
  return { chunks, messages: [...messages.values()] };
}

let rebuilt;
let cutAfter = null;
if (flag === "--cut") {
  // The SDK reads what the two connections carried, in order.
  const first = await readParts(Number(count));
  const rest = await connect(first.lastId);
  const joined = new ReadableStream({
    async start(controller) {
      controller.enqueue(new TextEncoder().encode(first.text));
      for await (const bytes of rest.body) controller.enqueue(bytes);
      controller.close();
    },
  });
  rebuilt = await rebuild(joined);
  cutAfter = first.lastId;
} else {
  rebuilt = await rebuild((await connect(null)).body);
}
process.stdout.write(JSON.stringify({ ...rebuilt, cut_after: cutAfter }));
