// arrow_shim.cc — string columns of Parquet and Arrow IPC files through Apache
// Arrow's own C++ libraries (the pyarrow wheel's libarrow and libparquet; see
// docs/text.md for why these).  The only C++ in ztrain's library: the rest calls
// it through arrow_shim.h, and it calls back into C with plain pointers.
//
// Memory: a file is read a record batch at a time.  Parquet is decoded row group
// by row group, only the asked-for columns, in batches of Arrow's default size
// (64 Ki rows); an Arrow IPC file is memory-mapped and its batches point into the
// mapping, so no more than one batch's strings are resident beyond the page cache.
// Arrow's buffers come from Arrow's own memory pool, not ztrain's accounted
// allocator: they are the reader's transient working set, a batch at a time.
#include "arrow_shim.h"

extern "C" {
#include "../core/text.h" /* zt_utf8_invalid_at, a C function */
}

#include <arrow/api.h>
#include <arrow/array/validate.h>
#include <arrow/io/file.h>
#include <arrow/ipc/reader.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>

#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

int arrow_fail(zt_err *err, const char *shown, int parquet, const arrow::Status &st)
{
    return zt_fail(err, ZT_EINPUT, "%s: not a readable %s file: %s", shown,
                   parquet ? "Parquet" : "Arrow IPC (datasets' save_to_disk)", st.ToString().c_str());
}

// A batch source: Parquet's row-group reader or an IPC stream/file reader.
struct Source {
    std::shared_ptr<arrow::io::RandomAccessFile> file;
    std::unique_ptr<parquet::arrow::FileReader> pq;
    std::shared_ptr<arrow::RecordBatchReader> batches;         // Parquet and IPC streams
    std::shared_ptr<arrow::ipc::RecordBatchFileReader> ipc_file; // the IPC file format
    std::shared_ptr<arrow::Schema> schema;
};

// An IPC file (the random-access format) starts with "ARROW1"; datasets'
// save_to_disk writes the stream format, which does not.
bool is_ipc_file_format(const std::shared_ptr<arrow::io::RandomAccessFile> &f)
{
    auto head = f->ReadAt(0, 6);
    return head.ok() && (*head)->size() == 6 && std::memcmp((*head)->data(), "ARROW1", 6) == 0;
}

bool holds_strings(const arrow::DataType &t)
{
    return t.id() == arrow::Type::STRING || t.id() == arrow::Type::LARGE_STRING;
}

int open_source(const char *path, const char *shown, int parquet, const std::vector<std::string> *cols, Source *s,
                zt_err *err)
{
    arrow::Status st;
    if (parquet) {
        auto f = arrow::io::ReadableFile::Open(path);
        if (!f.ok())
            return arrow_fail(err, shown, parquet, f.status());
        s->file = *f;
        auto r = parquet::arrow::OpenFile(s->file, arrow::default_memory_pool());
        if (!r.ok())
            return arrow_fail(err, shown, parquet, r.status());
        s->pq = std::move(*r);
        if (!(st = s->pq->GetSchema(&s->schema)).ok())
            return arrow_fail(err, shown, parquet, st);
        if (!cols)
            return ZT_OK;
        // only the asked-for leaf columns are decoded (a missing one is named by
        // the caller's schema check before this); a nested column (a list of
        // structs) has several leaves, and then every column is read
        std::vector<int> leaves, groups;
        bool nested = false;
        auto pschema = s->pq->parquet_reader()->metadata()->schema();
        for (const auto &c : *cols) {
            int k = pschema->ColumnIndex(c);
            auto field = s->schema->GetFieldByName(c);
            nested |= field && !holds_strings(*field->type());
            if (k >= 0)
                leaves.push_back(k);
        }
        for (int g = 0; g < s->pq->num_row_groups(); g++)
            groups.push_back(g);
        auto b = nested ? s->pq->GetRecordBatchReader(groups) : s->pq->GetRecordBatchReader(groups, leaves);
        if (!b.ok())
            return arrow_fail(err, shown, parquet, b.status());
        s->batches = std::move(*b);
        return ZT_OK;
    }
    auto f = arrow::io::MemoryMappedFile::Open(path, arrow::io::FileMode::READ);
    if (!f.ok())
        return arrow_fail(err, shown, parquet, f.status());
    s->file = *f;
    if (is_ipc_file_format(s->file)) {
        auto r = arrow::ipc::RecordBatchFileReader::Open(s->file);
        if (!r.ok())
            return arrow_fail(err, shown, parquet, r.status());
        s->ipc_file = *r;
        s->schema = s->ipc_file->schema();
        return ZT_OK;
    }
    auto r = arrow::ipc::RecordBatchStreamReader::Open(s->file);
    if (!r.ok())
        return arrow_fail(err, shown, parquet, r.status());
    s->batches = *r;
    s->schema = s->batches->schema();
    return ZT_OK;
}


// The string at row i of a string or large_string array.
std::string_view value(const arrow::Array &a, int64_t i)
{
    if (a.type_id() == arrow::Type::LARGE_STRING)
        return static_cast<const arrow::LargeStringArray &>(a).GetView(i);
    return static_cast<const arrow::StringArray &>(a).GetView(i);
}

// What a JSON-mode column may hold: strings, numbers, booleans and nulls, in
// lists and structs (TRL's messages: list<struct<role: string, content: string>>).
bool holds_json(const arrow::DataType &t)
{
    switch (t.id()) {
    case arrow::Type::STRING: case arrow::Type::LARGE_STRING: case arrow::Type::BOOL: case arrow::Type::INT32:
    case arrow::Type::INT64: case arrow::Type::DOUBLE: case arrow::Type::NA:
        return true;
    case arrow::Type::LIST: case arrow::Type::LARGE_LIST: case arrow::Type::STRUCT:
        for (const auto &f : t.fields())
            if (!holds_json(*f->type()))
                return false;
        return true;
    default:
        return false;
    }
}

void json_string(std::string_view v, std::string &out)
{
    out += '"';
    for (unsigned char c : v) {
        char esc[8];
        if (c == '"' || c == '\\') {
            out += '\\';
            out += (char)c;
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            out += esc;
        } else
            out += (char)c;
    }
    out += '"';
}

void to_json(const arrow::Array &a, int64_t i, std::string &out);

// Row i of a list or large_list array as a JSON array.  One template for both:
// each array is cast only to its own class (a ListArray read through a
// LargeListArray reference is undefined behaviour, and clang's UBSan says so).
template <class List> void list_json(const List &l, int64_t i, std::string &out)
{
    int64_t from = l.value_offset(i), to = l.value_offset(i + 1);
    const arrow::Array &vals = *l.values();
    out += '[';
    for (int64_t k = from; k < to; k++) {
        if (k > from)
            out += ", ";
        to_json(vals, k, out);
    }
    out += ']';
}

// Row i of a (holds_json) array as JSON text, appended to out: a struct as an
// object with its fields in schema order, a list as an array.
void to_json(const arrow::Array &a, int64_t i, std::string &out)
{
    if (a.IsNull(i)) {
        out += "null";
        return;
    }
    switch (a.type_id()) {
    case arrow::Type::STRING: case arrow::Type::LARGE_STRING: json_string(value(a, i), out); return;
    case arrow::Type::BOOL: out += static_cast<const arrow::BooleanArray &>(a).Value(i) ? "true" : "false"; return;
    case arrow::Type::INT32: out += std::to_string(static_cast<const arrow::Int32Array &>(a).Value(i)); return;
    case arrow::Type::INT64: out += std::to_string(static_cast<const arrow::Int64Array &>(a).Value(i)); return;
    case arrow::Type::DOUBLE: {
        char buf[32];
        snprintf(buf, sizeof buf, "%.17g", static_cast<const arrow::DoubleArray &>(a).Value(i));
        out += buf;
        return;
    }
    case arrow::Type::STRUCT: {
        const auto &st = static_cast<const arrow::StructArray &>(a);
        out += '{';
        for (int f = 0; f < st.num_fields(); f++) {
            if (f)
                out += ", ";
            json_string(st.type()->field(f)->name(), out);
            out += ": ";
            to_json(*st.field(f), i, out);
        }
        out += '}';
        return;
    }
    case arrow::Type::LIST: list_json(static_cast<const arrow::ListArray &>(a), i, out); return;
    case arrow::Type::LARGE_LIST: list_json(static_cast<const arrow::LargeListArray &>(a), i, out); return;
    default: out += "null"; return;
    }
}

// Each column of cols is in the schema, once, and holds strings.
int check_columns(const Source &s, const char *shown, const std::vector<std::string> &cols, bool json, zt_err *err)
{
    for (const auto &c : cols) {
        auto found = s.schema->GetAllFieldsByName(c);
        if (found.empty()) {
            std::string have;
            for (const auto &f : s.schema->fields())
                have += (have.empty() ? "" : ", ") + f->name();
            return zt_fail(err, ZT_EINPUT, "%s: no column \"%s\" (its columns: %s)%s", shown, c.c_str(),
                           have.c_str(), cols.size() == 1 ? "; choose the text column with --text_field" : "");
        }
        if (found.size() > 1)
            return zt_fail(err, ZT_EINPUT, "%s: column \"%s\" appears %zu times", shown, c.c_str(), found.size());
        if (json ? !holds_json(*found[0]->type()) : !holds_strings(*found[0]->type()))
            return zt_fail(err, ZT_EINPUT, "%s: column \"%s\" is %s, not %s", shown, c.c_str(),
                           found[0]->type()->ToString().c_str(),
                           json ? "lists and structs of strings, numbers and booleans"
                                : "strings (string or large_string)");
    }
    return ZT_OK;
}

// The type t with every string made binary: the same layout (offsets, then
// bytes) without UTF-8's promise, so that Arrow's full validation checks the
// offsets of a column and leaves its UTF-8 to each_row, which names the row.
std::shared_ptr<arrow::DataType> bytes_type(const std::shared_ptr<arrow::DataType> &t)
{
    switch (t->id()) {
    case arrow::Type::STRING: return arrow::binary();
    case arrow::Type::LARGE_STRING: return arrow::large_binary();
    case arrow::Type::LIST: return arrow::list(t->field(0)->WithType(bytes_type(t->field(0)->type())));
    case arrow::Type::LARGE_LIST:
        return arrow::large_list(t->field(0)->WithType(bytes_type(t->field(0)->type())));
    case arrow::Type::STRUCT: {
        arrow::FieldVector fields;
        for (const auto &f : t->fields())
            fields.push_back(f->WithType(bytes_type(f->type())));
        return arrow::struct_(fields);
    }
    default: return t;
    }
}

// A shallow copy of d (the same buffers) typed by bytes_type, children too.
std::shared_ptr<arrow::ArrayData> as_bytes(const arrow::ArrayData &d)
{
    auto c = std::make_shared<arrow::ArrayData>(d);
    c->type = bytes_type(d.type);
    for (auto &child : c->child_data)
        child = as_bytes(*child);
    return c;
}

// Call fn for each row of one batch; row0: the rows of the file before it.
int each_row(const arrow::RecordBatch &b, const char *shown, const std::vector<std::string> &cols, int64_t row0,
             bool json, zt_arrow_row_fn fn, void *ctx, zt_err *err)
{
    std::vector<std::shared_ptr<arrow::Array>> arrays;
    for (const auto &c : cols) {
        auto a = b.GetColumnByName(c);
        if (!a)
            return zt_fail(err, ZT_EINPUT, "%s: a record batch has no column \"%s\"", shown, c.c_str());
        if (json ? !holds_json(*a->type()) : !holds_strings(*a->type())) // as the schema; checked all the same
            return zt_fail(err, ZT_EINPUT, "%s: column \"%s\" is %s, not strings", shown, c.c_str(),
                           a->type()->ToString().c_str());
        // Arrow's IPC reader trusts a file's offsets: a string's or a list's
        // offsets past its data buffer would be read as memory.  The O(n) check
        // (offsets in range and rising, nested arrays too) is Arrow's own; UTF-8
        // is checked below, per row, where the row can be named (as_bytes).
        arrow::Status st = arrow::internal::ValidateArrayFull(*as_bytes(*a->data()));
        if (!st.ok())
            return zt_fail(err, ZT_EINPUT, "%s: column \"%s\" is malformed (rows %lld to %lld): %s", shown,
                           c.c_str(), (long long)row0, (long long)(row0 + b.num_rows() - 1), st.message().c_str());
        arrays.push_back(a);
    }
    std::vector<const char *> vals(cols.size());
    std::vector<size_t> lens(cols.size());
    std::vector<std::string> text(cols.size()); // JSON mode: each value's JSON
    for (int64_t i = 0; i < b.num_rows(); i++) {
        for (size_t k = 0; k < cols.size(); k++) {
            if (arrays[k]->IsNull(i))
                return zt_fail(err, ZT_EINPUT, "%s: column \"%s\", row %lld is null (every row needs a string)",
                               shown, cols[k].c_str(), (long long)(row0 + i));
            if (json) {
                text[k].clear();
                to_json(*arrays[k], i, text[k]);
            }
            std::string_view v = json ? std::string_view(text[k]) : value(*arrays[k], i);
            vals[k] = v.data();
            lens[k] = v.size();
            // Arrow does not check a Parquet column's UTF-8 on reading: the
            // file, column and row are named here, where they are known
            size_t bad = zt_utf8_invalid_at(reinterpret_cast<const unsigned char *>(v.data()), v.size());
            if (bad < v.size())
                return zt_fail(err, ZT_EINPUT, "%s: column \"%s\", row %lld: byte offset %zu is not valid UTF-8 "
                               "(byte 0x%02X)", shown, cols[k].c_str(), (long long)(row0 + i), bad,
                               (unsigned)(unsigned char)v[bad]);
        }
        int rc = fn(ctx, vals.data(), lens.data(), err);
        if (rc) // what the row's reader found, said of the file and row
            return zt_wrap(err, "%s: row %lld: ", shown, (long long)(row0 + i));
    }
    return ZT_OK;
}

int read_all(const char *path, const char *shown, int parquet, const std::vector<std::string> &cols, bool json,
             zt_arrow_row_fn fn, void *ctx, zt_err *err)
{
    Source s;
    int rc = open_source(path, shown, parquet, &cols, &s, err);
    if (!rc)
        rc = check_columns(s, shown, cols, json, err);
    int64_t rows = 0;
    if (!rc && s.ipc_file) {
        for (int k = 0; !rc && k < s.ipc_file->num_record_batches(); k++) {
            auto b = s.ipc_file->ReadRecordBatch(k);
            if (!b.ok())
                return arrow_fail(err, shown, parquet, b.status());
            rc = each_row(**b, shown, cols, rows, json, fn, ctx, err);
            rows += (*b)->num_rows();
        }
        return rc;
    }
    while (!rc) {
        std::shared_ptr<arrow::RecordBatch> b;
        arrow::Status st = s.batches->ReadNext(&b);
        if (!st.ok())
            return arrow_fail(err, shown, parquet, st);
        if (!b)
            break;
        rc = each_row(*b, shown, cols, rows, json, fn, ctx, err);
        rows += b->num_rows();
    }
    return rc;
}

std::vector<std::string> names(const char *const *cols, int n)
{
    std::vector<std::string> v;
    for (int i = 0; i < n; i++)
        v.emplace_back(cols[i]);
    return v;
}

} // namespace

// Arrow reports through Status; parquet's lower layers may still throw
// (ParquetException), and the standard library throws bad_alloc: every
// exception becomes an error value here, at the border with C.
extern "C" int zt_arrow_read(const char *path, const char *shown, int parquet, const char *const *cols, int n,
                             int json, zt_arrow_row_fn fn, void *ctx, zt_err *err)
{
    try {
        return read_all(path, shown, parquet, names(cols, n), json != 0, fn, ctx, err);
    } catch (const std::bad_alloc &) {
        return zt_fail(err, ZT_EFAIL, "%s: out of memory while reading it", shown);
    } catch (const std::exception &e) {
        return zt_fail(err, ZT_EINPUT, "%s: not a readable %s file: %s", shown, parquet ? "Parquet" : "Arrow IPC",
                       e.what());
    }
}

extern "C" int zt_arrow_has_columns(const char *path, const char *shown, int parquet, const char *const *cols, int n,
                                    int *yes, zt_err *err)
{
    *yes = 0;
    try {
        Source s;
        int rc = open_source(path, shown, parquet, nullptr, &s, err);
        if (rc)
            return rc;
        *yes = 1;
        for (int i = 0; i < n; i++)
            if (s.schema->GetFieldIndex(cols[i]) < 0)
                *yes = 0;
        return ZT_OK;
    } catch (const std::bad_alloc &) {
        return zt_fail(err, ZT_EFAIL, "%s: out of memory while reading it", shown);
    } catch (const std::exception &e) {
        return zt_fail(err, ZT_EINPUT, "%s: not a readable %s file: %s", shown, parquet ? "Parquet" : "Arrow IPC",
                       e.what());
    }
}
