// normalizer: an event-normalization pipeline. Each worker thread takes raw events
// ("key=value ..." lines), parses them, lower-cases the short identifier fields (user, host,
// action, tags), fingerprints and formats the normalized record. The lower-casing is a small part
// of the CPU time (1-2%), the kind of function a sampling profiler at 1 Hz never resolves.
//
//   --mode=icu   every field goes through ICU: icu_lower() -> ucasemap_utf8ToLower()
//   --mode=fast  ascii_fast_lower(): checks 8 bytes at a time for non-ASCII and upper-case bytes,
//                lower-cases ASCII with a plain tolower loop, and falls back to icu_lower() only
//                for the few fields that contain non-ASCII bytes (about 3% of them)
//
// Usage: normalizer [--mode=icu|fast] [--duration S] [--threads N] [--work N]
// At exit prints one JSON line, e.g.
//   {"sample":"normalizer","variant":"icu","seconds":10.0,"work":123456,"unit":"events",...,
//    "icu_calls":..., "fields":...}
#include <unicode/ucasemap.h>
#include <unicode/utypes.h>

#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../common/sample.h"

const char kUsage[] =
    "usage: normalizer [--mode=icu|fast] [--duration SECONDS] [--threads N] [--work N]\n"
    "  --mode      icu: lower-case every field with ICU ucasemap_utf8ToLower (default)\n"
    "              fast: ASCII fast path, ICU only for non-ASCII fields\n"
    "  --duration  run time in seconds (default 10); SIGINT/SIGTERM end it early\n"
    "  --threads   worker threads (default 2)\n"
    "  --work      fingerprint rounds per event (default 20)\n"
    "Prints one JSON line with the event count and rate at exit.\n";

int g_work_rounds = 20;
bool g_fast = false;

// ---------------------------------------------------------------- lower-casing

struct CaseMapper {
    UCaseMap* map = nullptr;
    uint64_t icu_calls = 0;
    CaseMapper() {
        UErrorCode status = U_ZERO_ERROR;
        map = ucasemap_open("", 0, &status);
        if (U_FAILURE(status)) {
            std::fprintf(stderr, "normalizer: ucasemap_open failed: %s\n", u_errorName(status));
            std::exit(1);
        }
    }
    ~CaseMapper() { ucasemap_close(map); }
};

// The one call into ICU. Kept as its own frame so that frame-pointer unwinding (ICU itself is
// built without frame pointers) still shows icu_lower above every ICU sample.
__attribute__((noinline)) int32_t icu_utf8_to_lower(UCaseMap* map, std::string_view in, char* out,
                                                    size_t cap, UErrorCode* status) {
    SAMPLE_FRAME();
    int32_t n = ucasemap_utf8ToLower(map, out, static_cast<int32_t>(cap), in.data(),
                                     static_cast<int32_t>(in.size()), status);
    asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
    return n;
}

__attribute__((noinline)) size_t icu_lower(CaseMapper& cm, std::string_view in, char* out,
                                           size_t cap) {
    SAMPLE_FRAME();
    cm.icu_calls++;
    UErrorCode status = U_ZERO_ERROR;
    int32_t n = icu_utf8_to_lower(cm.map, in, out, cap, &status);
    if (U_FAILURE(status) || n < 0 || static_cast<size_t>(n) > cap) {
        size_t k = in.size() < cap ? in.size() : cap;
        std::memcpy(out, in.data(), k);  // keep the field as it was rather than lose it
        return k;
    }
    return static_cast<size_t>(n);
}

// True when any of the 8 bytes is >= 0x80 (non-ASCII).
inline bool has_non_ascii(uint64_t w) { return (w & 0x8080808080808080ULL) != 0; }

// True when any of the 8 (ASCII) bytes is in 'A'..'Z'.
inline bool has_upper(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ULL;
    uint64_t ge_a = w + (0x80 - 'A') * ones;  // high bit set where byte >= 'A'
    uint64_t gt_z = w + (0x80 - 'Z' - 1) * ones;  // high bit set where byte > 'Z'
    return ((ge_a & ~gt_z) & 0x8080808080808080ULL) != 0;
}

__attribute__((noinline)) size_t ascii_fast_lower(CaseMapper& cm, std::string_view in, char* out,
                                                  size_t cap) {
    SAMPLE_FRAME();
    if (in.size() > cap) return icu_lower(cm, in, out, cap);
    bool upper = false;
    size_t i = 0;
    for (; i + 8 <= in.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, in.data() + i, 8);
        if (has_non_ascii(w)) return icu_lower(cm, in, out, cap);
        upper = upper || has_upper(w);
    }
    for (; i < in.size(); i++) {
        unsigned char c = static_cast<unsigned char>(in[i]);
        if (c >= 0x80) return icu_lower(cm, in, out, cap);
        upper = upper || (c >= 'A' && c <= 'Z');
    }
    if (!upper) {
        std::memcpy(out, in.data(), in.size());
        return in.size();
    }
    for (size_t k = 0; k < in.size(); k++) {
        unsigned char c = static_cast<unsigned char>(in[k]);
        out[k] = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    return in.size();
}

__attribute__((noinline)) size_t lower_field(CaseMapper& cm, std::string_view in, char* out,
                                             size_t cap) {
    SAMPLE_FRAME();
    return g_fast ? ascii_fast_lower(cm, in, out, cap) : icu_lower(cm, in, out, cap);
}

// ---------------------------------------------------------------- the event pipeline

struct Event {
    std::string_view fields[8];
    std::string_view keys[8];
    int count = 0;
};

// "ts=... user=... host=... action=... tag=... msg=..." -> key/value views
__attribute__((noinline)) bool parse_event(const std::string& raw, Event& ev) {
    SAMPLE_FRAME();
    std::string_view s(raw);
    ev.count = 0;
    while (!s.empty() && ev.count < 8) {
        size_t eq = s.find('=');
        if (eq == std::string_view::npos) return false;
        size_t end = s.find(' ', eq);
        if (end == std::string_view::npos) end = s.size();
        ev.keys[ev.count] = s.substr(0, eq);
        ev.fields[ev.count] = s.substr(eq + 1, end - eq - 1);
        ev.count++;
        s.remove_prefix(end < s.size() ? end + 1 : s.size());
    }
    return ev.count > 0;
}

// Lower-cases the identifier fields (everything but ts and msg) into `buf`.
__attribute__((noinline)) size_t normalize_event(CaseMapper& cm, const Event& ev, char* buf,
                                                 size_t cap, uint64_t& fields) {
    SAMPLE_FRAME();
    size_t used = 0;
    for (int i = 0; i < ev.count; i++) {
        if (ev.keys[i] == "ts" || ev.keys[i] == "msg") continue;
        used += lower_field(cm, ev.fields[i], buf + used, cap - used);
        buf[used++] = '|';
        fields++;
    }
    return used;
}

// "2024-03-05T10:20:30Z" -> seconds since the epoch (UTC, proleptic Gregorian).
__attribute__((noinline)) int64_t parse_timestamp(std::string_view ts) {
    SAMPLE_FRAME();
    int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
    std::string copy(ts);
    if (std::sscanf(copy.c_str(), "%d-%d-%dT%d:%d:%dZ", &y, &mo, &d, &h, &mi, &sec) != 6) return 0;
    y -= mo <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return ((era * 146097 + doe - 719468) * 24 + h) * 3600 + mi * 60 + sec;
}

// Looks the host up in the inventory (site and owning team).
struct HostInfo {
    std::string site, team;
};
using Inventory = std::unordered_map<std::string, HostInfo>;

__attribute__((noinline)) const HostInfo* enrich_event(const Inventory& inventory,
                                                       std::string_view host) {
    SAMPLE_FRAME();
    auto it = inventory.find(std::string(host));
    return it == inventory.end() ? nullptr : &it->second;
}

__attribute__((noinline)) uint64_t fingerprint_event(std::string_view normalized,
                                                     const Event& ev) {
    SAMPLE_FRAME();
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int r = 0; r < g_work_rounds; r++) {
        h = fnv1a(normalized, h);
        for (int i = 0; i < ev.count; i++) h = fnv1a(ev.fields[i], h) ^ (h >> 31);
    }
    return h;
}

__attribute__((noinline)) size_t format_record(const Event& ev, std::string_view normalized,
                                               int64_t when, const HostInfo* info, uint64_t fp,
                                               char* out, size_t cap) {
    SAMPLE_FRAME();
    int n = std::snprintf(
        out, cap, "{\"fp\":\"%016llx\",\"t\":%lld,\"site\":\"%s\",\"team\":\"%s\",\"key\":\"%.*s\","
                  "\"msg\":\"%.*s\"}",
        static_cast<unsigned long long>(fp), static_cast<long long>(when),
        info ? info->site.c_str() : "", info ? info->team.c_str() : "",
        static_cast<int>(normalized.size()), normalized.data(),
        static_cast<int>(ev.count ? ev.fields[ev.count - 1].size() : 0),
        ev.count ? ev.fields[ev.count - 1].data() : "");
    return n > 0 ? static_cast<size_t>(n) : 0;
}

// The same event as a CEF line for the SIEM forwarder.
__attribute__((noinline)) size_t format_cef(const Event& ev, int64_t when, uint64_t fp, char* out,
                                            size_t cap) {
    SAMPLE_FRAME();
    int n = std::snprintf(out, cap, "CEF:0|wallflame|normalizer|1.0|%llu|event|3|rt=%lld",
                          static_cast<unsigned long long>(fp % 1000), static_cast<long long>(when));
    for (int i = 0; i < ev.count && n > 0 && static_cast<size_t>(n) < cap; i++)
        n += std::snprintf(out + n, cap - static_cast<size_t>(n), " cs%d=%.*s cs%dLabel=%.*s", i,
                           static_cast<int>(ev.fields[i].size()), ev.fields[i].data(), i,
                           static_cast<int>(ev.keys[i].size()), ev.keys[i].data());
    return n > 0 && static_cast<size_t>(n) < cap ? static_cast<size_t>(n) : cap;
}

__attribute__((noinline)) uint64_t process_event(CaseMapper& cm, const Inventory& inventory,
                                                 const std::string& raw, uint64_t& fields) {
    SAMPLE_FRAME();
    Event ev;
    if (!parse_event(raw, ev)) return 0;
    int64_t when = parse_timestamp(ev.fields[0]);
    char normalized[512];
    size_t n = normalize_event(cm, ev, normalized, sizeof normalized, fields);
    const HostInfo* info = enrich_event(inventory, ev.count > 2 ? ev.fields[2] : "");
    uint64_t fp = fingerprint_event(std::string_view(normalized, n), ev);
    char record[1024];
    size_t m = format_record(ev, std::string_view(normalized, n), when, info, fp, record,
                             sizeof record);
    uint64_t out = fnv1a(std::string_view(record, m), fp);
    m = format_cef(ev, when, fp, record, sizeof record);
    return fnv1a(std::string_view(record, m), out);
}

Inventory make_inventory() {
    static const char* const kHosts[] = {"WEB-01", "web-02", "Db-Primary", "cache-7", "EDGE-LB"};
    Inventory inv;
    for (int i = 0; i < 5; i++) inv[kHosts[i]] = HostInfo{"dc-" + std::to_string(i % 2), "team-" + std::to_string(i)};
    return inv;
}

// A ring of raw events generated once; mixed case, about 3% of the fields non-ASCII.
std::vector<std::string> make_events() {
    static const char* const kUsers[] = {"Alice",   "BOB",    "carol", "Dave.Smith", "eve",
                                         "Frank_O", "grace",  "HEIDI", "ivan",       "Judy"};
    static const char* const kIntl[] = {"Jürgen", "ÅSA", "Zoë", "Ğökhan", "Łukasz", "Émilie"};
    static const char* const kHosts[] = {"WEB-01", "web-02", "Db-Primary", "cache-7", "EDGE-LB"};
    static const char* const kActions[] = {"LOGIN", "Logout", "read", "WRITE", "Delete", "grant"};
    static const char* const kTags[] = {"Prod", "STAGING", "eu-West-1", "US-EAST-2", "canary"};
    std::vector<std::string> events;
    for (uint32_t i = 0; i < 4096; i++) {
        uint32_t x = i * 2654435761u;
        bool intl = x % 100 < 12;  // one of the four lowered fields is non-ASCII: ~3% of fields
        char line[512];
        std::snprintf(line, sizeof line,
                      "ts=2024-03-%02uT%02u:%02u:%02uZ user=%s host=%s action=%s tag=%s "
                      "msg=request-%u-completed-in-%ums",
                      1 + i % 28, i / 3600 % 24, i / 60 % 60, i % 60,
                      intl ? kIntl[(x >> 7) % 6] : kUsers[(x >> 7) % 10], kHosts[(x >> 11) % 5],
                      kActions[(x >> 13) % 6], kTags[(x >> 17) % 5], x % 100000, x % 900);
        events.emplace_back(line);
    }
    return events;
}

struct WorkerTotals {
    uint64_t events = 0, checksum = 0, fields = 0, icu_calls = 0;

    void merge(const WorkerTotals& t) {
        events += t.events;
        checksum ^= t.checksum;
        fields += t.fields;
        icu_calls += t.icu_calls;
    }
};

__attribute__((noinline)) void normalizer_loop(int index, const std::vector<std::string>& events,
                                               WorkerTotals& totals) {
    SAMPLE_FRAME();
    sample::name_thread("normalizer-" + std::to_string(index));
    CaseMapper cm;
    Inventory inventory = make_inventory();
    size_t i = static_cast<size_t>(index) * 997;
    while (!sample::g_stop.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 64; k++) {
            totals.checksum += process_event(cm, inventory, events[i++ % events.size()], totals.fields);
            totals.events++;
        }
    }
    totals.icu_calls = cm.icu_calls;
}

int main(int argc, char** argv) {
    sample::Options opt(argc, argv, "normalizer", kUsage);
    std::string variant = opt.choice("mode", {"icu", "fast"});
    double duration = opt.number("duration", 10, 0.1, 86400);
    int threads = static_cast<int>(opt.number("threads", 2, 1, 64));
    g_work_rounds = static_cast<int>(opt.number("work", 20, 0, 100000));
    opt.done();
    g_fast = variant == "fast";

    std::vector<std::string> events = make_events();
    sample::block_stop_signals();
    sample::Workers<WorkerTotals> workers(threads);
    workers.start(normalizer_loop, std::cref(events));
    double seconds = workers.run_for(duration);

    const WorkerTotals& sum = workers.sum();
    sample::Result("normalizer", variant, seconds, sum.events, "events")
        .add("threads", threads)
        .add("fields", sum.fields)
        .add("icu_calls", sum.icu_calls)
        .add("checksum", sum.checksum)
        .print();
    return 0;
}
