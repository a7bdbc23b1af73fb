"""The swarm's own tools: each module exports ``handlers`` (see goondan.yaml)."""
