"""What every package of the runtime shares and nothing else: the defaults, the error catalogue
and the timestamp format. It imports nothing of the runtime, so any package may import it."""
