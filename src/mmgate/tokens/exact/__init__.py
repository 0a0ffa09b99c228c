"""Engine-exact token ids from a served model's own tokenizer.json and chat template.

:mod:`.files` reads a local model folder, :mod:`.template` renders its chat template in a sandbox,
:mod:`.conversation` builds what vLLM hands the template, :mod:`.placeholders` says how each family's
processor expands media, :mod:`.tokenizer` puts them together, and :mod:`.modes` chooses per served
model between these ids and the pseudo-token stream. The tokenizer needs the ``tokenizer`` extra
(``tokenizers``, ``jinja2``) and is imported only when a model is in engine mode; nothing here
downloads anything.
"""

from mmgate.tokens.exact.files import ModelFilesError
from mmgate.tokens.exact.modes import TokenMode, TokenModes

__all__ = ["ModelFilesError", "TokenMode", "TokenModes"]
