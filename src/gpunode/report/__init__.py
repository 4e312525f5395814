"""The cluster report: `gpunode validate` result files merged into one HTML page, JUnit
XML, the merged JSON and a Markdown summary (see build.build)."""
