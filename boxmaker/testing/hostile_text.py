"""Text that tries to drive the owner's terminal, for the tests of everything that shows
what a model wrote: colours, a cleared screen, a window title, hidden text, moving back
over what was written, C1 controls, OSC 8 hyperlinks and OSC 52 clipboard writes, and
the Unicode that reorders or hides what is read.
"""

from __future__ import annotations

CONTROLS = (
    "echo \x1b[31mred\x1b[0m \x1b]0;title\x07 \x1b[2J\x1b[H \x1b[8mhidden\x1b[28m"
    " back\x08\x08\r over \x9b31m c1 \x7f del\ttab\nnewline"
    " \u202eevil.sh\u202c zero\u200bwidth \u2066isolate\u2069 bom\ufeff"
)
OSC_8 = "\x1b]8;;https://evil.example/\x1b\\harmless\x1b]8;;\x1b\\"
OSC_52 = "\x1b]52;c;cHduZWQ=\x07"  # "pwned", to the clipboard
TITLE = "\x1b]2;pwned-title\x07"

# each hidden character above, as `escape_model_text` spells it
SPELLED = ("\\u001b", "\\u0007", "\\u009b", "\\u202e", "\\u200b", "\\u2066", "\\u2069", "\\ufeff")
