"""The tests' shared fakes and harnesses, in one place.

* ``anthropic``: ``FakeAnthropic`` (messages, Message Batches, failures on demand) and
  ``ToolUseAnthropic`` behind httpx2.MockTransport, for the real SDK; body builders.
* ``anthropic_server``: the same fake behind a loopback HTTP server, for subprocesses.
* ``embedders``: ``TableEmbedder``, chosen similarities without a semantic model.
* ``prefect``: one real ``prefect server start`` per test process (schedules, subprocesses).
* ``mcp``: a demo home and the MCP SDK's real client over stdio and HTTP.

Our own stores are never faked: tests use real LanceDB and DuckDB in temporary homes.
"""
