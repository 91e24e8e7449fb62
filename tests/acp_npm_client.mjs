// A second editor for `clovercode acp`: the ACP TypeScript SDK from npm (@agentclientprotocol/sdk,
// pinned in tests/npm_fixtures.py) speaks the protocol, validates what arrives against its own
// schema types and runs the session; this file only wires it to a subprocess, answers its file
// reads from disk, allows what it is asked, and prints one JSON line for tests/test_acp.py.
//
//   node acp_npm_client.mjs PROJECT PROMPT -- AGENT_COMMAND...
// The SDK is found through NODE_PATH (an ES module import does not search it, so it is resolved here).

import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const [project, promptText, separator, ...agentCommand] = process.argv.slice(2);
if (separator !== "--" || agentCommand.length === 0) {
  console.error("usage: node acp_npm_client.mjs PROJECT PROMPT -- AGENT_COMMAND...");
  process.exit(2);
}
const require = createRequire(join(process.env.NODE_PATH ?? ".", "noop.js"));
const acp = await import(pathToFileURL(require.resolve("@agentclientprotocol/sdk")).href);

const child = spawn(agentCommand[0], agentCommand.slice(1), { cwd: project, stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const reads = [];

const outcome = await acp
  .client({ name: "clovercode-test-client" })
  .onRequest("session/request_permission", ({ params }) => ({
    outcome: { outcome: "selected", optionId: params.options.find((o) => o.kind === "allow_once").optionId },
  }))
  .onRequest("fs/read_text_file", async ({ params }) => {
    reads.push(params.path);
    return { content: await readFile(params.path, "utf8") };
  })
  .onRequest("fs/write_text_file", () => ({}))
  .connectWith(stream, async (agent) => {
    await agent.request("initialize", {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: true, writeTextFile: true } },
    });
    return agent.buildSession(project).withSession(async (session) => {
      session.prompt(promptText);
      const kinds = [];
      let text = "";
      for (;;) {
        const message = await session.nextUpdate();
        if (message.kind === "stop") {
          return { stopReason: message.stopReason, kinds, text };
        }
        kinds.push(message.update.sessionUpdate);
        if (message.update.sessionUpdate === "agent_message_chunk" && message.update.content.type === "text") {
          text += message.update.content.text;
        }
      }
    });
  });

child.stdin.end();
console.log(JSON.stringify({ ...outcome, reads }));
