"""Run by the training tests under `accelerate launch`: trains with the given flags, then writes this process's final
parameters to <output_dir>/params_rank<rank>.safetensors so the test can compare the ranks."""

import sys

from accelerate import PartialState
from safetensors.torch import save_file

from hfpolicy.training import parse_train_config, train

if __name__ == "__main__":
    result = train(parse_train_config(sys.argv[1:]))
    state = {k: v.detach().contiguous().cpu() for k, v in result.policy.state_dict().items()}
    save_file(state, str(result.output_dir / f"params_rank{PartialState().process_index}.safetensors"))
