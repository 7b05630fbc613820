#!/usr/bin/env bash
# generate_chat.sh — `ztrain generate --chat` on tests/fixtures/generate_chat (a small
# Llama with ChatML special tokens and SmolLM2's chat template): the conversation is
# rendered with add_generation_prompt and tokenized to as many ids as transformers'
# apply_chat_template gives, the greedy reply has transformers' generate's bytes and
# length and ends at <|im_end|> (generation_config.json's eos); generation_config.json's
# defaults apply (do_sample with temperature 0.7, 33 new tokens) and flags override them;
# `ztrain chat` holds a two-turn conversation read from stdin.
source "$(dirname "$0")/lib.bash"
fix=tests/fixtures/generate_chat
field() { python3 -c "import json,sys; d=json.load(open('$fix/expected.json')); print($1)"; }
n_prompt=$(field "len(d['prompt_ids'])")
n_new=$(field "len(d['new_ids'])")
want_hex=$(field "d['reply_hex']")

"$ZTRAIN" generate --model $fix --chat --system "$(field "d['system']")" --prompt "$(field "d['user']")" \
    --do_sample false >"$TMP/reply" 2>"$TMP/err" || fail "generate --chat failed: $(cat "$TMP/err")"
got_hex=$(od -An -tx1 -v <"$TMP/reply" | tr -d ' \n')
[ "$got_hex" = "$want_hex" ] || fail "greedy chat reply bytes [$got_hex], transformers gave [$want_hex]"
grep -q "$n_prompt prompt tokens" "$TMP/err" || fail "the chat prompt is not $n_prompt tokens: $(cat "$TMP/err")"
grep -q "$n_new new tokens" "$TMP/err" || fail "the reply is not $n_new tokens: $(cat "$TMP/err")"
grep -q "stopped by end of sequence" "$TMP/err" || fail "the reply did not end at the end of turn: $(cat "$TMP/err")"

# generation_config.json's defaults: do_sample true, so the seed matters and the text
# differs from the greedy one; --do_sample false and --temperature 0 are both greedy
"$ZTRAIN" generate --model $fix --chat --prompt "Hi" --seed 1 >"$TMP/s1" 2>/dev/null || fail "sampled chat failed"
"$ZTRAIN" generate --model $fix --chat --prompt "Hi" --seed 1 >"$TMP/s1b" 2>/dev/null || fail "sampled chat failed"
"$ZTRAIN" generate --model $fix --chat --prompt "Hi" --seed 2 >"$TMP/s2" 2>/dev/null || fail "sampled chat failed"
"$ZTRAIN" generate --model $fix --chat --prompt "Hi" --do_sample false >"$TMP/g1" 2>/dev/null || fail "greedy failed"
"$ZTRAIN" generate --model $fix --chat --prompt "Hi" --temperature 0 >"$TMP/g2" 2>/dev/null || fail "greedy failed"
cmp -s "$TMP/s1" "$TMP/s1b" || fail "the same seed sampled two different replies"
cmp -s "$TMP/s1" "$TMP/s2" && cmp -s "$TMP/s1" "$TMP/g1" && fail "generation_config.json's do_sample was ignored"
cmp -s "$TMP/g1" "$TMP/g2" || fail "--temperature 0 and --do_sample false differ"
# max_new_tokens 33 from generation_config.json unless --max_new_tokens says otherwise
"$ZTRAIN" generate --model $fix --prompt "The licence" --do_sample false >/dev/null 2>"$TMP/err" ||
    fail "plain generate failed: $(cat "$TMP/err")"
grep -q "33 new tokens" "$TMP/err" || fail "max_new_tokens is not 33: $(cat "$TMP/err")"
"$ZTRAIN" generate --model $fix --prompt "The licence" --do_sample false --max_new_tokens 3 >/dev/null 2>"$TMP/err"
grep -q " 3 new tokens" "$TMP/err" || fail "--max_new_tokens 3 ignored: $(cat "$TMP/err")"

# `ztrain chat`: two turns from stdin; each reply is transformers' greedy one for the
# conversation so far (the first reply kept as the assistant's message), one per line
printf '%s\n%s\n' "$(field "d['user']")" "$(field "d['user2']")" |
    "$ZTRAIN" chat --model $fix --system "$(field "d['system']")" --do_sample false >"$TMP/chat" 2>"$TMP/err" ||
    fail "ztrain chat failed: $(cat "$TMP/err")"
got_hex=$(od -An -tx1 -v <"$TMP/chat" | tr -d ' \n')
[ "$got_hex" = "${want_hex}0a$(field "d['reply2_hex']")0a" ] ||
    fail "ztrain chat printed [$got_hex], transformers' two replies are [$want_hex] and [$(field "d['reply2_hex']")]"

# a tokenizer without a chat template, and --system without --chat, are refused
expect_exit 2 "no \"chat_template\"" -- "$ZTRAIN" generate --model tests/fixtures/generate --chat --prompt x \
    --tokenizer tests/fixtures/tokenizers/gpt2
expect_exit 2 "--system .*needs --chat" -- "$ZTRAIN" generate --model $fix --system x --prompt x
exit $((fails > 0))
