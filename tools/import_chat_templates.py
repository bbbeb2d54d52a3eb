#!/usr/bin/env python3
"""Copies the chat templates of tests/fixtures/templates/ out of a llama.cpp
checkout (an independent source of models' own templates) and writes
manifest.json with each template's provenance.

    /usr/bin/python3 tools/import_chat_templates.py /tmp/peer/llama.cpp tests/fixtures/templates

Two sources inside llama.cpp: models/templates/*.jinja (each fetched from a
model's tokenizer_config.json by llama.cpp's scripts/get_chat_template.py)
and the template strings of tests/test-chat-template.cpp, whose test cases
name the model each template belongs to. bos/eos are the strings the
template is rendered with in the fixtures: the model's own for the first 28
(and gemma-4, DeepSeek-V3.1, Qwen3-Coder, granite-4.0 and 4.1, Devstral,
Ministral, Command-R7B), "<s>" and "</s>" for the others.
"""
import ast
import json
import os
import re
import subprocess
import sys

# file in models/templates -> (model, bos, eos)
FILES = [
    ("meta-llama-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "<|begin_of_text|>", "<|eot_id|>"),
    ("meta-llama-Llama-3.2-3B-Instruct", "meta-llama/Llama-3.2-3B-Instruct", "<|begin_of_text|>", "<|eot_id|>"),
    ("meta-llama-Llama-3.3-70B-Instruct", "meta-llama/Llama-3.3-70B-Instruct", "<|begin_of_text|>", "<|eot_id|>"),
    ("Qwen-Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "", "<|im_end|>"),
    ("Qwen-Qwen3-0.6B", "Qwen/Qwen3-0.6B", "", "<|im_end|>"),
    ("Qwen-QwQ-32B", "Qwen/QwQ-32B", "", "<|im_end|>"),
    ("microsoft-Phi-3.5-mini-instruct", "microsoft/Phi-3.5-mini-instruct", "<s>", "<|endoftext|>"),
    ("google-gemma-2-2b-it", "google/gemma-2-2b-it", "<bos>", "<eos>"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "mistralai/Mistral-Nemo-Instruct-2407", "<s>", "</s>"),
    ("Mistral-Small-3.2-24B-Instruct-2506", "mistralai/Mistral-Small-3.2-24B-Instruct-2506", "<s>", "</s>"),
    ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
     "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
     "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    ("HuggingFaceTB-SmolLM3-3B", "HuggingFaceTB/SmolLM3-3B", "", "<|im_end|>"),
    ("openai-gpt-oss-120b", "openai/gpt-oss-120b", "<|startoftext|>", "<|return|>"),
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "NousResearch/Hermes-2-Pro-Llama-3-8B (tool_use)",
     "<|begin_of_text|>", "<|im_end|>"),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "NousResearch/Hermes-3-Llama-3.1-8B (tool_use)",
     "<|begin_of_text|>", "<|im_end|>"),
    ("ibm-granite-granite-3.3-2B-Instruct", "ibm-granite/granite-3.3-2b-instruct", "<|end_of_text|>",
     "<|end_of_text|>"),
    ("fireworks-ai-llama-3-firefunction-v2", "fireworks-ai/llama-3-firefunction-v2", "<|begin_of_text|>",
     "<|eot_id|>"),
    ("meetkai-functionary-medium-v3.1", "meetkai/functionary-medium-v3.1", "<|begin_of_text|>", "<|eot_id|>"),
    ("meetkai-functionary-medium-v3.2", "meetkai/functionary-medium-v3.2", "<|begin_of_text|>", "<|eot_id|>"),
    ("CohereForAI-c4ai-command-r-plus-tool_use", "CohereForAI/c4ai-command-r-plus (tool_use)", "<BOS_TOKEN>",
     "<|END_OF_TURN_TOKEN|>"),
    # newer models: the model is as llama.cpp's file name gives it; bos/eos "<s>"/"</s>" where not the model's
    ("google-gemma-4-31B-it", "google/gemma-4-31B-it", "<bos>", "<eos>"),
    ("GLM-4.6", "GLM-4.6", "<s>", "</s>"),
    ("moonshotai-Kimi-K2", "moonshotai/Kimi-K2", "<s>", "</s>"),
    ("deepseek-ai-DeepSeek-V3.1", "deepseek-ai/DeepSeek-V3.1", "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
     "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    ("Qwen3-Coder", "Qwen3-Coder", "", "<|im_end|>"),
    ("ibm-granite-granite-4.0", "ibm-granite/granite-4.0", "<|end_of_text|>", "<|end_of_text|>"),
    ("Apertus-8B-Instruct", "Apertus-8B-Instruct", "<s>", "</s>"),
    ("LFM2-8B-A1B", "LFM2-8B-A1B", "<s>", "</s>"),
    ("MiniMax-M2", "MiniMax-M2", "<s>", "</s>"),
    ("NVIDIA-Nemotron-Nano-v2", "NVIDIA-Nemotron-Nano-v2", "<s>", "</s>"),
    ("unsloth-mistral-Devstral-Small-2507", "unsloth mistral Devstral-Small-2507", "<s>", "</s>"),
    ("mistralai-Ministral-3-14B-Reasoning-2512", "mistralai/Ministral-3-14B-Reasoning-2512", "<s>", "</s>"),
    ("CohereForAI-c4ai-command-r7b-12-2024-tool_use", "CohereForAI/c4ai-command-r7b-12-2024 (tool_use)",
     "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    ("ByteDance-Seed-OSS", "ByteDance Seed-OSS", "<s>", "</s>"),
    ("Reka-Edge", "Reka-Edge", "<s>", "</s>"),
    ("tencent-Hy3", "tencent Hy3", "<s>", "</s>"),
    ("ibm-granite-granite-4.1", "ibm-granite/granite-4.1", "<|end_of_text|>", "<|end_of_text|>"),
]

# test case name in tests/test-chat-template.cpp -> (fixture name, model, bos, eos)
CASES = [
    ("mistralai/Mistral-7B-Instruct-v0.2 (NOTE: Old pre-v1 without a system prompt)",
     "mistralai-Mistral-7B-Instruct-v0.2", "mistralai/Mistral-7B-Instruct-v0.2 (template before v1)", "<s>", "</s>"),
    ("bofenghuang/vigogne-2-70b-chat", "bofenghuang-vigogne-2-70b-chat",
     "bofenghuang/vigogne-2-70b-chat (Llama 2 chat format)", "<s>", "</s>"),
    ("google/gemma-7b-it", "google-gemma-7b-it", "google/gemma-7b-it", "<bos>", "<eos>"),
    ("teknium/OpenHermes-2.5-Mistral-7B", "teknium-OpenHermes-2.5-Mistral-7B",
     "teknium/OpenHermes-2.5-Mistral-7B (ChatML)", "<s>", "<|im_end|>"),
    ("Phi-3-mini", "microsoft-Phi-3-mini", "Phi-3-mini (llama.cpp's test case name)", "<s>", "<|endoftext|>"),
    ("deepseek-ai/deepseek-coder-33b-instruct", "deepseek-ai-deepseek-coder-33b-instruct",
     "deepseek-ai/deepseek-coder-33b-instruct", "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<|EOT|>"),
    ("CohereForAI/c4ai-command-r-plus", "CohereForAI-c4ai-command-r-plus-default",
     "CohereForAI/c4ai-command-r-plus (default)", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    ("phi-4", "microsoft-phi-4", "phi-4 (llama.cpp's test case name)", "<s>", "</s>"),
]


def test_case_templates(src):
    """name -> template string of tests/test-chat-template.cpp's cases."""
    out = {}
    pat = re.compile(r'/\* \.name= \*/ "((?:[^"\\]|\\.)*)",\s*(?://[^\n]*\n\s*)*/\* \.template_str= \*/ ((?:"(?:[^"\\]|\\.)*"\s*)+),')
    for m in pat.finditer(src):
        parts = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))
        out[ast.literal_eval('"' + m.group(1) + '"')] = "".join(ast.literal_eval('"' + p + '"') for p in parts)
    return out


def main():
    peer, dest = sys.argv[1], sys.argv[2]
    rev = subprocess.run(["git", "-C", peer, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    manifest = []
    for stem, model, bos, eos in FILES:
        path = os.path.join(peer, "models", "templates", stem + ".jinja")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        with open(os.path.join(dest, stem + ".jinja"), "w", encoding="utf-8") as f:
            f.write(text)
        manifest.append({"name": stem, "file": stem + ".jinja", "model": model,
                         "source": f"llama.cpp {rev[:7]} models/templates/{stem}.jinja",
                         "bos_token": bos, "eos_token": eos})
    with open(os.path.join(peer, "tests", "test-chat-template.cpp"), encoding="utf-8") as f:
        cases = test_case_templates(f.read())
    for case, stem, model, bos, eos in CASES:
        with open(os.path.join(dest, stem + ".jinja"), "w", encoding="utf-8") as f:
            f.write(cases[case])
        manifest.append({"name": stem, "file": stem + ".jinja", "model": model,
                         "source": f"llama.cpp {rev[:7]} tests/test-chat-template.cpp, case \"{case}\"",
                         "bos_token": bos, "eos_token": eos})
    # kvlm's own templates (models/shakespeare-chat's) stay, after the imported ones
    old = os.path.join(dest, "manifest.json")
    if os.path.exists(old):
        with open(old, encoding="utf-8") as f:
            manifest += [t for t in json.load(f) if t["source"].startswith("kvlm's own")]
    with open(os.path.join(dest, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(manifest)} templates")


if __name__ == "__main__":
    main()
