"""``goondan test``: the cases of a bundle's TestSuites, run through the real machinery.

Each case gets its own daemon (an in-process :class:`~orchestrator.daemon.Orchestrator` on a
temporary state directory) whose agents are real AgentProcesses running real tools in their
sandbox; only the model calls differ: answered from the case's cassette (the default, with no
network) or, with ``--record``, sent to the real provider and written to it. What happened is
read from the runtime events the daemon records, and held against the case's ``expect``.

- :mod:`.cases`: the cases of a bundle, selected by ``-k``, and where their cassettes live;
- :mod:`.observe`: what a case's run showed (answers, tool calls, handoffs, Steps, tokens);
- :mod:`.expect`: the checks of ``expect``, each failure naming what was expected and found;
- :mod:`.runner`: one case on its daemon, and a suite's cases in parallel up to a bound;
- :mod:`.report`: the summary table, ``--json`` and ``--junit``.
"""
