"""A deterministic local judge for the MMVM parity fixtures: the same function answers the official scorers
(run outside the repository, see tests/data/mmvm_parity/README.md) and our scorer (behind the loopback
server), so any difference in verdicts comes from the scorers, not the judge.

Matcher prompts (MMVMEvalKit `build_prompt_mmatch`): the option whose ID the answer names as a number, the
None option when the answer says "none", "I cannot tell" for an answer holding "garbage", else Z.
Yes/no prompts (VLMEvalKit MMVMBench): "[YES]" when the answer letter stands alone in the response, a reply
with no tag for a response holding "garbage", else "[NO]".
"""

from __future__ import annotations

import re

_PUNCT = str.maketrans({c: " " for c in ".()[],:;!*#{}"})


def _options(block: str) -> dict[str, str]:
    out = {}
    for line in block.split("\n"):
        line = line.strip()
        if "." in line:
            k, v = line.split(".", 1)
            out[k.strip()] = v.strip()
    return out


def matcher_reply(prompt: str) -> str:
    """The reply to one matcher prompt (Example 5 is the row's)."""
    last = prompt.rsplit("Example 5: \n", 1)[1]
    options = _options(last.split("\nOptions: ", 1)[1].split("\nAnswer: ", 1)[0])
    answer = last.split("\nAnswer: ", 1)[1].rsplit("\nYour output: ", 1)[0]
    if "garbage" in answer:
        return "I cannot tell"
    numbers = set(re.findall(r"\d+", answer))
    named = [k for k, v in options.items() if v in numbers]
    if len(named) == 1:
        return named[0]
    if "none" in answer.lower():
        return list(options)[-1]
    return "Z"


def yes_no_reply(prompt: str) -> str:
    """The reply to one VLMEvalKit MMVMBench judge prompt."""
    response = prompt.split("The model's response was: {", 1)[1].rsplit("}. The correct answer", 1)[0]
    answer = prompt.split("The correct answer to this question is: {", 1)[1].rsplit("}. Please", 1)[0]
    if "garbage" in response:
        return "Hmm."
    letter = answer.strip()[:1]
    return "[YES]" if letter and letter in response.translate(_PUNCT).split() else "[NO]"


def judge_reply(prompt: str) -> str:
    """Either kind of prompt."""
    return yes_no_reply(prompt) if prompt.startswith("I asked a model a question") else matcher_reply(prompt)
