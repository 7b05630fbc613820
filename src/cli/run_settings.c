/* run_settings.c — see run_settings.h. */
#include "run_settings.h"

#include <stdio.h>
#include <string.h>

#include "../io/hf_model.h"

int zt_flag_given(void *ctx, const char *name)
{
    const flag_table *t = ctx;
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->flags[i].name, name))
            return t->flags[i].seen;
    return 0;
}

int zt_resolve_run(zt_settings *st, const char *model_dir, const char *model_config, int world,
                   const zt_topology *topo, zt_llama_config *cfg, zt_plan *plan, zt_err *err)
{
    int rc = model_config ? zt_hf_config_read(model_config, cfg, err) : zt_hf_read_config_dir(model_dir, cfg, err);
    if (rc)
        return rc;
    return zt_settings_plan(st, world, cfg->hidden_size, cfg->torch_dtype, topo, plan, err);
}

void zt_print_config_notes(const zt_settings *st, FILE *f)
{
    for (int i = 0; i < st->accel.nnotes; i++)
        fprintf(f, "ztrain: warning: %s\n", st->accel.notes[i]);
}
