/* schema.h — one engine behind ztrain's strict config readers.
 *
 * A config file (the Accelerate YAML, the DeepSpeed JSON, a model's config.json)
 * is first parsed by its format's front end into a zt_doc: a tree of zt_node
 * that says, for every value, its type as the format resolves it, its text as
 * written and its line.  A format is then a table of keys per section
 * (zt_schema_key: name, kind, range or allowed values, and the field of the
 * target struct it lands in) plus the checks across keys, which run after the
 * walk.  zt_schema_read_map walks one mapping against one section:
 *   - a key given twice is refused;
 *   - an unknown key is refused with the closest known name, or with the
 *     section it belongs to when it is another section's key;
 *   - each value is read by its kind into the target struct: the generic kinds
 *     here (booleans, enumerations, strings, sections, ...), the format's own
 *     (numbers in its syntax, special forms) by its read_custom;
 *   - where each key was given is recorded, for the cross-key checks.
 * Every failure is ZT_EINPUT with "FILE:LINE: KEY.PATH: what was wrong"
 * (formats without lines: "FILE: KEY.PATH: ..."), unless the format words its
 * own messages through its hooks. */
#ifndef ZT_SCHEMA_H
#define ZT_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* ---- the document --------------------------------------------------------- */

typedef enum zt_node_type {
    ZT_NODE_NULL, ZT_NODE_BOOL, ZT_NODE_INT, ZT_NODE_FLOAT, ZT_NODE_STR, ZT_NODE_LIST, ZT_NODE_MAP
} zt_node_type;

typedef struct zt_node {
    zt_node_type type;
    int line;                 /* 1-based line where it starts; 0: the format has none (JSON) */
    const struct zt_node *key; /* a mapping's member: its key node (NULL otherwise) */
    const char *text;         /* scalars as written ("" for an empty one); "" for LIST and MAP */
    double num;               /* INT, FLOAT: the value */
    int boolean;              /* BOOL: 0 or 1 */
    int64_t integer;          /* INT: the exact value, when in_range */
    int in_range;             /* INT: the literal fits an int64 */
    struct zt_node *child;    /* LIST: the items; MAP: the members, each with its key */
    struct zt_node *next;
} zt_node;

/* A tree and the blocks it is made of (accounted to ZT_MEM_OTHER). */
typedef struct zt_doc {
    zt_node *root;
    void *blocks;
} zt_doc;

/* A new node of doc with a copy of text[0..len); NULL when out of memory. */
zt_node *zt_doc_node(zt_doc *doc, zt_node_type type, int line, const char *text, size_t len);
void zt_doc_free(zt_doc *doc);

/* A setting a file may give as yes or no, leave out, or (some keys) leave to the
 * run as "auto". */
typedef enum zt_setting { ZT_UNSET, ZT_NO, ZT_YES, ZT_AUTO } zt_setting;

/* ---- key tables --------------------------------------------------------------- */

enum zt_schema_kind {
    ZT_K_BOOL,      /* true/false (or "auto" with .autook) into a zt_setting; .fixed: only .want */
    ZT_K_ENUM,      /* one of .allowed into a char field, in its canonical spelling */
    ZT_K_STR,       /* any string into a char field (or checked and ignored) */
    ZT_K_SECTION,   /* a mapping read with .section's table */
    ZT_K_ANY_MAP,   /* a mapping whose contents do not concern ztrain */
    ZT_K_STR_LIST,  /* a list of strings */
    ZT_K_SCALAR,    /* any single value */
    ZT_K_CUSTOM     /* the format's own kinds start here (read by its read_custom) */
};

#define ZT_NO_FIELD ((size_t)-1)

typedef struct zt_schema_section zt_schema_section;

typedef struct zt_schema_key {
    const char *name;
    int kind;                    /* an zt_schema_kind, or the format's own >= ZT_K_CUSTOM */
    size_t off, cap;             /* the field in the target struct; ZT_NO_FIELD: checked, then ignored */
    double min, max;             /* numeric kinds: the accepted range */
    int integer;                 /* numeric kinds: a whole number */
    int autook;                  /* "auto" is accepted (Accelerate fills it from the run) */
    int fixed, want;             /* ZT_K_BOOL: only `want` is accepted, because of .why */
    int required;                /* zt_schema_missing reports it when absent */
    const char *const *allowed;  /* ZT_K_ENUM: NULL-terminated, canonical spelling */
    int icase;                   /* ZT_K_ENUM: match ignoring case */
    const char *const *refused;  /* ZT_K_ENUM: values known but refused, with ... */
    const char *refusal;         /* ... this reason */
    const char *why;             /* why a value is restricted */
    const zt_schema_section *section; /* ZT_K_SECTION */
    const void *custom;          /* the format's own data for its kinds */
} zt_schema_key;

struct zt_schema_section {
    int id;                      /* index into the reader's records, < ZT_SCHEMA_MAX_SECTIONS */
    const char *name;            /* the key path prefix; "" at the top level */
    const zt_schema_key *keys;
    int nkeys;                   /* <= ZT_SCHEMA_MAX_KEYS */
};

#define ZT_SCHEMA_MAX_SECTIONS 16
#define ZT_SCHEMA_MAX_KEYS 40
#define ZT_SCHEMA_NKEYS(t) ((int)(sizeof(t) / sizeof((t)[0])))

typedef struct zt_schema_reader zt_schema_reader;

/* What differs between formats, besides their tables. */
typedef struct zt_schema_format {
    const zt_schema_section *const *sections; /* every section, for "it belongs under" */
    int nsections;
    int has_lines;               /* messages say FILE:LINE */
    int null_is_absent;          /* a null value means the key is absent (read_custom sees none) */
    int unknown_first;           /* an unknown key is reported before a duplicate one */
    const char *list_word, *map_word; /* "a list" / "an array", "a mapping" / "an object" */
    int numbers_as_written;      /* describe numbers by their text ("the integer 5") rather than
                                  * by value ("the number 5") */
    const char *section_want;    /* "a mapping of %s keys": what a section's value must be */
    int (*read_custom)(zt_schema_reader *r, const zt_schema_key *k, const zt_node *v,
                       const char *keypath);
    /* NULL: the engine's wording (zt_schema_unknown_key, "duplicate key").  An
     * unknown_key that returns ZT_OK accepts the key, and the walk goes on. */
    int (*unknown_key)(zt_schema_reader *r, const zt_schema_section *s, const zt_node *member,
                       const char *keypath);
    int (*duplicate_key)(zt_schema_reader *r, const zt_node *member, const zt_node *first,
                         const char *keypath);
    /* NULL, or: the current name of key `name` of section s when it is an old name the
     * format still reads (a deprecated spelling), written into buf; NULL when it is not
     * one.  The value is then read as that key's, a note names the new key (notes
     * below), and giving both names is refused. */
    const char *(*renamed)(const zt_schema_section *s, const char *name, char *buf, size_t cap);
} zt_schema_format;

#define ZT_SCHEMA_MAX_NOTES 8
#define ZT_SCHEMA_NOTE_LEN 320

struct zt_schema_reader {
    const zt_schema_format *fmt;
    const char *path;            /* the file (or name) for messages */
    void *target;                /* the struct the keys' offsets point into */
    void *ctx;                   /* the format's own reading state */
    zt_err *err;
    /* per section and key: the line where it was given a non-null value (1 without
     * lines), 0 when absent; seen: given at all, null included */
    int line[ZT_SCHEMA_MAX_SECTIONS][ZT_SCHEMA_MAX_KEYS];
    char seen[ZT_SCHEMA_MAX_SECTIONS][ZT_SCHEMA_MAX_KEYS];
    char nonempty[ZT_SCHEMA_MAX_SECTIONS]; /* the section's mapping had a member */
    /* warnings for the user (deprecated names read under their new ones), "FILE:LINE: ..." */
    char notes[ZT_SCHEMA_MAX_NOTES][ZT_SCHEMA_NOTE_LEN];
    int nnotes;
};

/* Add a warning to r->notes (printf-style; dropped beyond ZT_SCHEMA_MAX_NOTES). */
void zt_schema_note(zt_schema_reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void zt_schema_reader_init(zt_schema_reader *r, const zt_schema_format *fmt, const char *path,
                           void *target, void *ctx, zt_err *err);

/* Walk mapping map against section s (see the top of this file). */
int zt_schema_read_map(zt_schema_reader *r, const zt_schema_section *s, const zt_node *map);

/* Where section s's key `name` was given (see line above); 0 if absent. */
int zt_schema_given(const zt_schema_reader *r, const zt_schema_section *s, const char *name);

/* The first required key of s that was not given at all, or NULL. */
const zt_schema_key *zt_schema_missing(const zt_schema_reader *r, const zt_schema_section *s);

/* ZT_EINPUT "FILE:LINE: KEYPATH: what" (or "FILE: KEYPATH: what" without lines). */
int zt_schema_bad(zt_schema_reader *r, int line, const char *keypath, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* "the string 'abc'", "the integer 5", "a list", ... for "expected X, got Y". */
const char *zt_schema_describe(const zt_schema_reader *r, const zt_node *v, char *buf, size_t cap);

/* Unknown key `name` among keys[0..n) of section self (NULL: a fixed set such as a
 * typed block's type/params): the section it belongs to when it is another
 * section's key, else the closest known name. */
int zt_schema_unknown_key(zt_schema_reader *r, int line, const char *keypath, const char *name,
                          const zt_schema_key *keys, int n, const zt_schema_section *self);

/* The target's field of key k, and a string stored into it (nothing for ZT_NO_FIELD). */
void *zt_schema_field(zt_schema_reader *r, const zt_schema_key *k);
void zt_schema_set_string(zt_schema_reader *r, const zt_schema_key *k, const char *s);

/* v is the string "auto". */
int zt_schema_is_auto(const zt_node *v);

#endif
