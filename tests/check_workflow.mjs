// Parse a GitHub Actions workflow with GitHub's own parser (@actions/workflow-parser) and print
// {"errors": [...], "jobs": [...]} as JSON. Usage: node check_workflow.mjs PARSER_PREFIX WORKFLOW.yml
import { readFileSync } from "node:fs";
import { register } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

// The package imports its JSON schema without an import attribute (it expects a bundler); Node 20
// refuses that, so JSON files are served as ES modules instead.
const jsonAsModule = `
export async function load(url, context, next) {
  if (!url.endsWith(".json")) return next(url, context);
  const { readFileSync } = await import("node:fs");
  const { fileURLToPath } = await import("node:url");
  return { format: "module", shortCircuit: true, source: "export default " + readFileSync(fileURLToPath(url), "utf8") + ";" };
}`;
register("data:text/javascript," + encodeURIComponent(jsonAsModule), import.meta.url);

const [prefix, file] = process.argv.slice(2);
const parser = await import(pathToFileURL(join(prefix, "node_modules/@actions/workflow-parser/dist/index.js")).href);
const trace = new parser.NoOperationTraceWriter();
const result = parser.parseWorkflow({ name: file, content: readFileSync(file, "utf8") }, trace);
const errors = result.context.errors.getErrors().map((e) => e.message);
let jobs = [];
if (errors.length === 0) {
  const template = await parser.convertWorkflowTemplate(result.context, result.value);
  errors.push(...(template.errors || []).map((e) => e.Message ?? e.message ?? String(e)));
  errors.push(...result.context.errors.getErrors().map((e) => e.message));
  jobs = (template.jobs || []).map((job) => ({ id: job.id.value, steps: (job.steps || []).length, if: job.if?.expr ?? null }));
}
console.log(JSON.stringify({ errors, jobs }));
