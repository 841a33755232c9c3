"""LoRA adapters made and run by PEFT itself, for the trainer's LoRA tests
(tests/worker/trainer/models/lora_test.cc, worker/trainer/models/lora.h).

  lora_reference.py OUT_DIR           make the cases: OUT_DIR/reference.json and folders
  lora_reference.py --check BASE ADAPTER INPUTS_JSON
                                      PeftModel.from_pretrained(BASE, ADAPTER)'s logits on
                                      the inputs, as JSON on stdout
  lora_reference.py --check-merged BASE ADAPTER MERGED INPUTS_JSON
                                      PEFT's merge_and_unload() of BASE + ADAPTER against
                                      from_pretrained(MERGED): the largest weight difference
                                      and both models' logits, as JSON on stdout

Each case is a tiny random model of one architecture saved by transformers
(save_pretrained: OUT_DIR/CASE/base), a PEFT LoRA adapter on it with B non-zero
(init_lora_weights=False) saved by PEFT (OUT_DIR/CASE/adapter), and PEFT's numbers on fixed
inputs: eval-mode logits, the trainable parameters' gradients of the cross-entropy in train
mode (every dropout 0), and the trainable-parameter count.
"""
import json
import os
import sys

import torch
from peft import LoraConfig, PeftModel, TaskType, get_peft_model
from transformers import AutoModelForSequenceClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_decoders_reference as dec  # noqa: E402
import hf_models_reference as enc  # noqa: E402

# case -> (architecture's config, LoraConfig arguments): PEFT's default targets, named ones,
# all-linear, rslora, and GPT-2's Conv1D.
CASES = {
    "bert": ("bert", dict(r=4, lora_alpha=8)),
    "roberta": ("roberta", dict(r=4, lora_alpha=16, target_modules=["query", "key", "value", "dense"])),
    "distilbert": ("distilbert", dict(r=2, lora_alpha=4, target_modules=["q_lin", "v_lin", "lin1"])),
    "gpt2": ("gpt2", dict(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj"])),
    "llama": ("llama", dict(r=4, lora_alpha=8, target_modules="all-linear")),
    "mistral": ("mistral", dict(r=8, lora_alpha=8)),
    "qwen2": ("qwen2", dict(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                            use_rslora=True)),
}


def peft_name(name):
    """A PeftModel parameter's name as the base model (and our trainer) names it."""
    name = name.removeprefix("base_model.model.")
    return name.replace(".modules_to_save.default.", ".").replace(".default.", ".")


def model_and_inputs(arch):
    if arch in enc.configs():
        config = enc.configs()[arch]
        ids, mask = enc.inputs(config.pad_token_id, 0 if arch == "roberta" else 2)
        return config, ids, mask, enc.randomize
    config = dec.configs()[arch]
    config.pad_token_id = dec.PAD  # transformers needs one to batch; the last non-padding token is read
    ids, mask = dec.inputs()
    return config, ids, mask, dec.randomize


def make(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    cases = {}
    for seed, (case, (arch, lora)) in enumerate(CASES.items()):
        config, ids, mask, randomize = model_and_inputs(arch)
        torch.manual_seed(seed)
        model = AutoModelForSequenceClassification.from_config(config)
        randomize(model, seed)
        base = os.path.join(out_dir, case, "base")
        model.save_pretrained(base)
        peft_model = get_peft_model(model, LoraConfig(task_type=TaskType.SEQ_CLS, lora_dropout=0.0,
                                                      init_lora_weights=False, **lora))
        with torch.no_grad():  # a head away from the base's, so that its gradient and export count
            for name, p in peft_model.named_parameters():
                if "modules_to_save" in name:
                    p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(seed)) * 0.1)
        adapter = os.path.join(out_dir, case, "adapter")
        peft_model.save_pretrained(adapter)
        peft_model.eval()
        with torch.no_grad():
            logits = peft_model(input_ids=ids, attention_mask=mask).logits
        peft_model.train()
        loss = torch.nn.functional.cross_entropy(peft_model(input_ids=ids, attention_mask=mask).logits,
                                                 torch.tensor(enc.TARGETS))
        loss.backward()
        grads = {peft_name(n): p.grad.tolist() for n, p in peft_model.named_parameters() if p.requires_grad}
        trainable, _ = peft_model.get_nb_trainable_parameters()
        cases[case] = {"arch": arch, "input_ids": ids.tolist(), "attention_mask": mask.tolist(),
                       "targets": enc.TARGETS, "logits": logits.tolist(), "grads": grads, "trainable": trainable,
                       "loss": loss.item()}
        print(f"{case}: trainable {trainable}, loss {loss.item():.6f}")
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump({"cases": cases}, f)


def check(base, adapter, inputs_path):
    with open(inputs_path) as f:
        inputs = json.load(f)
    model = AutoModelForSequenceClassification.from_pretrained(base, dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(model, adapter).eval()
    with torch.no_grad():
        logits = peft_model(input_ids=torch.tensor(inputs["input_ids"]),
                            attention_mask=torch.tensor(inputs["attention_mask"])).logits
    json.dump({"logits": logits.tolist()}, sys.stdout)


def check_merged(base, adapter, merged, inputs_path):
    with open(inputs_path) as f:
        inputs = json.load(f)
    reference = PeftModel.from_pretrained(
        AutoModelForSequenceClassification.from_pretrained(base, dtype=torch.float32), adapter).merge_and_unload().eval()
    ours = AutoModelForSequenceClassification.from_pretrained(merged, dtype=torch.float32).eval()
    theirs = reference.state_dict()
    mine = ours.state_dict()
    if set(theirs) != set(mine):
        raise SystemExit(f"tensor names differ: {sorted(set(theirs) ^ set(mine))}")
    worst = max(float((theirs[k] - mine[k]).abs().max() / theirs[k].abs().max().clamp(min=1e-12)) for k in theirs)
    args = dict(input_ids=torch.tensor(inputs["input_ids"]), attention_mask=torch.tensor(inputs["attention_mask"]))
    with torch.no_grad():
        json.dump({"max_relative_weight_difference": worst, "logits": ours(**args).logits.tolist(),
                   "peft_logits": reference(**args).logits.tolist()}, sys.stdout)


if __name__ == "__main__":
    if sys.argv[1] == "--check":
        check(*sys.argv[2:5])
    elif sys.argv[1] == "--check-merged":
        check_merged(*sys.argv[2:6])
    else:
        make(sys.argv[1])
