"""A Hugging Face causal language model trained from a DataLoader, as a training script holds it.

A tiny GPT-2 (2 layers, 64 wide, vocabulary 256; built from a config, nothing downloaded) learns
sequences of a random Markov chain: each token is followed by one of a few tokens the seed picked.
The DataLoader's collate pads each batch to its own longest sequence (dynamic padding) and returns
a dict of ``input_ids``, ``attention_mask`` and ``labels`` (padding labelled -100), so
``model(**batch).loss`` is the loss: no wrapper and no loss of our own. Dropout stays at
Hugging Face's default 0.1; the trainer seeds it per step, the same in every trial.

Run it::

    python -m search.optimize --task examples.hf_causal_lm:build --trials 20
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader
from transformers import GPT2Config, GPT2LMHeadModel

from search.tasks import LoaderProblem

VOCAB, PAD = 256, 0


def _sequences(seed: int, count: int) -> list[torch.Tensor]:
    """``count`` token sequences of 12-32 tokens from the seed's Markov chain (token 0 is padding)."""
    generator = torch.Generator().manual_seed(seed)
    successors = torch.randint(1, VOCAB, (VOCAB, 4), generator=generator)  # each token's 4 followers
    out = []
    for _ in range(count):
        length = int(torch.randint(12, 33, (1,), generator=generator))
        tokens = [int(torch.randint(1, VOCAB, (1,), generator=generator))]
        for _ in range(length - 1):
            tokens.append(int(successors[tokens[-1], torch.randint(0, 4, (1,), generator=generator)]))
        out.append(torch.tensor(tokens))
    return out


def collate(sequences: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Pads to the batch's longest sequence: input_ids, attention_mask, and labels with -100 on padding."""
    longest = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), longest), PAD)
    mask = torch.zeros((len(sequences), longest), dtype=torch.long)
    for i, s in enumerate(sequences):
        input_ids[i, : len(s)], mask[i, : len(s)] = s, 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": input_ids.masked_fill(mask == 0, -100)}


def build(seed: int) -> LoaderProblem:
    torch.manual_seed(seed)  # The initial weights.
    config = GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=2, bos_token_id=1, eos_token_id=1
    )
    model = GPT2LMHeadModel(config)
    model.loss_type = "ForCausalLM"  # What transformers falls back to anyway, said outright (no warning).
    sequences = _sequences(seed, 640)  # One chain: 512 sequences to train on, 128 held out.
    train = DataLoader(sequences[:512], batch_size=32, shuffle=True, collate_fn=collate)
    valid = DataLoader(sequences[512:], batch_size=64, collate_fn=collate)
    return LoaderProblem(
        model=model,
        train_batches=train,
        make_optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3),
        steps=40,
        eval_batches=valid,
        grad_clip=1.0,
        seed=seed,
    )
