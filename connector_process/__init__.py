"""The process of one Connection: runs its connector and relays the events it emits.

The Orchestrator starts it like an AgentProcess (same supervisor, statuses, backoff and
graceful stop) through ``connector_process.main:serve``; it never runs agent logic.
"""
