"""The review's toolbox: read the project, run its tests, report findings, finish. No tool writes a
file or runs a command of the model's choosing: a review changes nothing (the tests run in the
sandbox, as in fix)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from clovercode.actions import files
from clovercode.actions.context import Observation, ToolContext, ToolError
from clovercode.actions.paths import display, resolve_in_root
from clovercode.actions.toolbox import FINISH, Handler
from clovercode.fixflow.testrun import TestCommand, TestRun, run_tests
from clovercode.front.review.findings import TOOL as REPORT_TOOL, Finding
from clovercode.toolcalls.schemas import ToolSpec, load_tool_specs

READ_ONLY = ("view_file", "list_files", "search_text")
RUN_TESTS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "run_tests",
    "description": "Run the project's tests (the configured command, in the sandbox) and read the result.",
    "type": "object", "properties": {}, "additionalProperties": False,
}
MAX_FINDINGS = 50


@dataclass
class ReviewTools:
    """The tools and what they collected: the findings, and the test runs."""

    tests: TestCommand | None
    timeout: float
    env: Mapping[str, str] | None = None
    findings: list[Finding] = field(default_factory=list)
    runs: list[TestRun] = field(default_factory=list)

    def toolbox(self) -> tuple[list[ToolSpec], dict[str, Handler]]:
        specs = load_tool_specs(names=(*READ_ONLY, FINISH)) + [REPORT_TOOL]
        handlers: dict[str, Handler] = {name: getattr(files, name) for name in READ_ONLY}
        handlers["report_finding"] = self.report
        if self.tests is not None:
            specs.append(ToolSpec("run_tests", str(RUN_TESTS_SCHEMA["description"]), RUN_TESTS_SCHEMA))
            handlers["run_tests"] = self.run_tests
        return specs, handlers

    def report(self, ctx: ToolContext, args: dict[str, Any]) -> Observation:
        finding = Finding.from_call(args)
        path = resolve_in_root(ctx.view, finding.file, must_exist=True)  # beneath the root, or a ToolError
        if ctx.view.kind(path) != "file":
            raise ToolError(f"{finding.file} is not a file")
        finding = Finding(display(ctx.root, path), finding.start_line, finding.end_line, finding.severity,
                          finding.title, finding.body, finding.suggestion)
        if any(f.key == finding.key for f in self.findings):
            return Observation(True, "This finding was already reported.")
        if len(self.findings) >= MAX_FINDINGS:
            return Observation(False, f"Error: at most {MAX_FINDINGS} findings; report the most important ones and finish.")
        self.findings.append(finding)
        return Observation(True, f"Recorded finding {len(self.findings)}: {finding.file}:{finding.start_line}-"
                                 f"{finding.end_line} ({finding.severity}).")

    def run_tests(self, ctx: ToolContext, args: dict[str, Any]) -> Observation:
        assert self.tests is not None
        run = run_tests(ctx.executor, ctx.root, self.tests.command, self.timeout, len(self.runs), self.env)
        self.runs.append(run)
        tail = run.output[-4000:]
        # the tool worked even when tests fail: a failing run is what the review reads, not an error of
        # the call (the loop stops a run after repeated failing calls)
        return Observation(True, f"`{self.tests.command}`: {run.describe()}\n{tail}", {"passed": run.passed})
