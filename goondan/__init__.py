"""What every package of the runtime shares and nothing else: the defaults, the error catalogue,
the timestamp format and the atomic write of a file. It imports nothing of the runtime, so any
package may import it."""
