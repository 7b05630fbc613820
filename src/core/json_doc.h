/* json_doc.h — a strict JSON parse (zt_json) as a schema document (schema.h),
 * so the config.json and DeepSpeed readers walk it with the key-table engine. */
#ifndef ZT_JSON_DOC_H
#define ZT_JSON_DOC_H

#include "json.h"
#include "schema.h"

/* Fill doc with j's tree: numbers written as integer literals become ZT_NODE_INT
 * (exact, in_range 0 past int64), others ZT_NODE_FLOAT; lines are 0.  Returns
 * ZT_OK or ZT_EFAIL (out of memory, "PATH: out of memory"). */
int zt_json_doc(const zt_json *j, const char *path, zt_doc *doc, zt_err *err);

#endif
