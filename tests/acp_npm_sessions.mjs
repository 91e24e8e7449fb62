// The npm SDK's client (@agentclientprotocol/sdk, pinned in tests/npm_fixtures.py) on a saved session:
// session/list, session/load (counting the updates that arrived before its answer), session/set_mode,
// one prompt, session/close. Prints one JSON line for tests/test_acp_wire.py.
//
//   node acp_npm_sessions.mjs PROJECT MODE PROMPT -- AGENT_COMMAND...

import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const [project, mode, promptText, separator, ...agentCommand] = process.argv.slice(2);
if (separator !== "--" || agentCommand.length === 0) {
  console.error("usage: node acp_npm_sessions.mjs PROJECT MODE PROMPT -- AGENT_COMMAND...");
  process.exit(2);
}
const require = createRequire(join(process.env.NODE_PATH ?? ".", "noop.js"));
const acp = await import(pathToFileURL(require.resolve("@agentclientprotocol/sdk")).href);

const child = spawn(agentCommand[0], agentCommand.slice(1), { cwd: project, stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const updates = [];
const asked = [];

const outcome = await acp
  .client({ name: "clovercode-test-client" })
  .onNotification("session/update", ({ params }) => {
    updates.push(params.update.sessionUpdate);
  })
  .onRequest("session/request_permission", ({ params }) => {
    asked.push(params.toolCall.toolCallId);
    return { outcome: { outcome: "selected", optionId: "allow-once" } };
  })
  .connectWith(stream, async (agent) => {
    await agent.request("initialize", { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
    const listed = await agent.request("session/list", { cwd: project });
    const sessionId = listed.sessions[0].sessionId;
    await agent.request("session/load", { sessionId, cwd: project, mcpServers: [] });
    const beforeLoadAnswer = updates.length;
    await agent.request("session/set_mode", { sessionId, modeId: mode });
    const response = await agent.request("session/prompt", { sessionId, prompt: [{ type: "text", text: promptText }] });
    await agent.request("session/close", { sessionId });
    return { sessionId, titles: listed.sessions.map((s) => s.title), beforeLoadAnswer, stopReason: response.stopReason };
  });

child.stdin.end();
console.log(JSON.stringify({ ...outcome, updates, asked }));
