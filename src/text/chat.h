/* chat.h — a model's conversations as its own chat template renders them.
 *
 * The template is tokenizer_config.json's "chat_template" (a string, or a list
 * of {"name", "template"} of which "default" is taken, as transformers does);
 * it is rendered by text/jinja.h over the variables transformers passes:
 * messages, add_generation_prompt and the special-token strings of the
 * tokenizer's special_tokens_map (bos_token, eos_token, unk_token, pad_token,
 * sep_token, cls_token, mask_token: those tokenizer_config.json names). */
#ifndef ZT_CHAT_H
#define ZT_CHAT_H

#include "../core/status.h"
#include "jinja.h"

struct cJSON;
typedef struct zt_chat zt_chat;

/* Load DIR/tokenizer_config.json's chat template.  A directory without one is
 * ZT_EINPUT naming the file. */
int zt_chat_load(const char *dir, zt_chat **out, zt_err *err);
void zt_chat_free(zt_chat *c);
/* 1 if the template marks the assistant's text with {% generation %}. */
int zt_chat_has_generation(const zt_chat *c);
/* The template's text for messages (a JSON array of {"role", "content"}). */
int zt_chat_render(const zt_chat *c, const struct cJSON *messages, int add_generation_prompt, zt_jinja_out *out,
                   zt_err *err);

#endif
