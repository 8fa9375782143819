// proxy: the request path of a reverse proxy. Worker threads take raw HTTP requests, parse them
// into a Request (method, path, headers, body buffer), route them, build the upstream request and
// the Response (headers, body) and serialize it into an output buffer.
//
//   --alloc=heap  every request allocates its objects: `new Request`, `new Response`, a std::map of
//                 std::string headers, std::string/std::vector buffers; all freed at the end of the
//                 request. operator new/delete and malloc/free are at the top of the profile.
//   --alloc=pool  the same work, but Request/Response/buffer objects come from a per-thread free
//                 list (RequestPool::acquire / release) and keep their capacity: header slots and
//                 buffers are reused, so steady state allocates (almost) nothing.
//
// A third variant keeps --alloc=heap and swaps the allocator with LD_PRELOAD, e.g.
//   LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 proxy --alloc=heap
//   LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 proxy --alloc=heap
// (the JSON line reports the preloaded library in "ld_preload").
//
// Usage: proxy [--alloc=heap|pool] [--duration S] [--threads N]
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../common/sample.h"

const char kUsage[] =
    "usage: proxy [--alloc=heap|pool] [--duration SECONDS] [--threads N]\n"
    "  --alloc     heap: new/delete and std containers per request (default)\n"
    "              pool: per-thread free lists of request/response objects and buffers\n"
    "  --duration  run time in seconds (default 10); SIGINT/SIGTERM end it early\n"
    "  --threads   worker threads (default 2)\n"
    "Variant with another allocator: LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4\n"
    "(or libjemalloc.so.2) proxy --alloc=heap\n"
    "Prints one JSON line with the request count and rate at exit.\n";

// ---------------------------------------------------------------- shared helpers

// Stands in for writing the bytes to a socket: reads them 8 at a time.
__attribute__((noinline)) uint64_t checksum(std::string_view s, uint64_t h) {
    SAMPLE_FRAME();
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, s.data() + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
    }
    for (; i < s.size(); i++) h = (h ^ static_cast<unsigned char>(s[i])) * 0x100000001b3ULL;
    return h;
}

struct Header {
    std::string name, value;
};

// ---------------------------------------------------------------- heap variant: allocate per request

struct HeapRequest {
    std::string method, path, version;
    std::map<std::string, std::string> headers;
    std::vector<char> body;
};

struct HeapResponse {
    int status = 200;
    std::vector<Header> headers;
    std::string body;
};

__attribute__((noinline)) HeapRequest* parse_request_heap(std::string_view raw) {
    SAMPLE_FRAME();
    auto* req = new HeapRequest;
    size_t eol = raw.find("\r\n");
    std::string_view line = raw.substr(0, eol);
    size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
    req->method = std::string(line.substr(0, sp1));
    req->path = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
    req->version = std::string(line.substr(sp2 + 1));
    raw.remove_prefix(eol + 2);
    while ((eol = raw.find("\r\n")) != 0 && eol != std::string_view::npos) {
        std::string_view h = raw.substr(0, eol);
        size_t colon = h.find(':');
        req->headers[std::string(h.substr(0, colon))] = std::string(h.substr(colon + 2));
        raw.remove_prefix(eol + 2);
    }
    raw.remove_prefix(2);
    req->body.assign(raw.begin(), raw.end());
    return req;
}

__attribute__((noinline)) std::string build_upstream_request_heap(const HeapRequest& req) {
    SAMPLE_FRAME();
    std::string out = req.method + " " + req.path + " " + req.version + "\r\n";
    for (const auto& [name, value] : req.headers) out += name + ": " + value + "\r\n";
    out += "X-Forwarded-For: 10.0.0.1\r\nVia: 1.1 proxy\r\n\r\n";
    out.append(req.body.begin(), req.body.end());
    return out;
}

__attribute__((noinline)) HeapResponse* build_response_heap(const HeapRequest& req,
                                                            uint64_t upstream_sum) {
    SAMPLE_FRAME();
    auto* resp = new HeapResponse;
    resp->headers.push_back({"Content-Type", "application/json"});
    resp->headers.push_back({"Cache-Control", "no-store"});
    resp->headers.push_back({"X-Request-Id", std::to_string(upstream_sum)});
    resp->headers.push_back({"Server", "proxy/1.0"});
    resp->body = "{\"path\":\"" + req.path + "\",\"items\":[";
    for (int i = 0; i < 24; i++) resp->body += "{\"id\":" + std::to_string(i) + ",\"ok\":true},";
    resp->body += "{}]}";
    resp->headers.push_back({"Content-Length", std::to_string(resp->body.size())});
    return resp;
}

__attribute__((noinline)) uint64_t serialize_response_heap(const HeapResponse& resp) {
    SAMPLE_FRAME();
    auto* buffer = new std::vector<char>();
    buffer->reserve(256);
    std::string status = "HTTP/1.1 " + std::to_string(resp.status) + " OK\r\n";
    buffer->insert(buffer->end(), status.begin(), status.end());
    for (const auto& h : resp.headers) {
        std::string line = h.name + ": " + h.value + "\r\n";
        buffer->insert(buffer->end(), line.begin(), line.end());
    }
    buffer->insert(buffer->end(), resp.body.begin(), resp.body.end());
    uint64_t sum = checksum(std::string_view(buffer->data(), buffer->size()), 7);
    delete buffer;
    return sum;
}

__attribute__((noinline)) uint64_t handle_request_heap(std::string_view raw) {
    SAMPLE_FRAME();
    HeapRequest* req = parse_request_heap(raw);
    std::string upstream = build_upstream_request_heap(*req);
    uint64_t sum = checksum(upstream, 0xcbf29ce484222325ULL);
    HeapResponse* resp = build_response_heap(*req, sum);
    sum ^= serialize_response_heap(*resp);
    delete resp;
    delete req;
    return sum;
}

// ---------------------------------------------------------------- pool variant: reuse per thread

// A fixed table of header slots whose strings keep their capacity between requests.
struct HeaderTable {
    Header slots[32];
    size_t count = 0;
    void clear() { count = 0; }
    void set(std::string_view name, std::string_view value) {
        if (count == 32) return;
        slots[count].name.assign(name);
        slots[count].value.assign(value);
        count++;
    }
};

struct PooledRequest {
    std::string method, path, version;
    HeaderTable headers;
    std::string body;
    std::string upstream;  // the upstream request is built in place
    PooledRequest* next_free = nullptr;
};

struct PooledResponse {
    int status = 200;
    HeaderTable headers;
    std::string body;
    std::string wire;  // serialized response
    PooledResponse* next_free = nullptr;
};

// Per-thread free lists of fixed-size objects: acquire() pops, release() pushes; nothing is
// returned to the heap while the worker runs.
class RequestPool {
public:
    ~RequestPool() {
        while (free_requests_) delete std::exchange(free_requests_, free_requests_->next_free);
        while (free_responses_) delete std::exchange(free_responses_, free_responses_->next_free);
    }
    __attribute__((noinline)) PooledRequest* acquire_request() {
        SAMPLE_FRAME();
        if (!free_requests_) return new PooledRequest;
        return std::exchange(free_requests_, free_requests_->next_free);
    }
    __attribute__((noinline)) PooledResponse* acquire_response() {
        SAMPLE_FRAME();
        if (!free_responses_) return new PooledResponse;
        return std::exchange(free_responses_, free_responses_->next_free);
    }
    void release(PooledRequest* r) { r->next_free = std::exchange(free_requests_, r); }
    void release(PooledResponse* r) { r->next_free = std::exchange(free_responses_, r); }

private:
    PooledRequest* free_requests_ = nullptr;
    PooledResponse* free_responses_ = nullptr;
};

__attribute__((noinline)) void append_number(std::string& out, uint64_t v) {
    SAMPLE_FRAME();
    char buf[24];
    int n = std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(v));
    out.append(buf, static_cast<size_t>(n));
}

__attribute__((noinline)) PooledRequest* parse_request_pool(RequestPool& pool,
                                                            std::string_view raw) {
    SAMPLE_FRAME();
    PooledRequest* req = pool.acquire_request();
    req->headers.clear();
    size_t eol = raw.find("\r\n");
    std::string_view line = raw.substr(0, eol);
    size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
    req->method.assign(line.substr(0, sp1));
    req->path.assign(line.substr(sp1 + 1, sp2 - sp1 - 1));
    req->version.assign(line.substr(sp2 + 1));
    raw.remove_prefix(eol + 2);
    while ((eol = raw.find("\r\n")) != 0 && eol != std::string_view::npos) {
        std::string_view h = raw.substr(0, eol);
        size_t colon = h.find(':');
        req->headers.set(h.substr(0, colon), h.substr(colon + 2));
        raw.remove_prefix(eol + 2);
    }
    raw.remove_prefix(2);
    req->body.assign(raw);
    return req;
}

__attribute__((noinline)) void build_upstream_request_pool(PooledRequest& req) {
    SAMPLE_FRAME();
    std::string& out = req.upstream;
    out.clear();
    out.append(req.method).append(" ").append(req.path).append(" ").append(req.version);
    out.append("\r\n");
    for (size_t i = 0; i < req.headers.count; i++)
        out.append(req.headers.slots[i].name).append(": ").append(req.headers.slots[i].value)
            .append("\r\n");
    out.append("X-Forwarded-For: 10.0.0.1\r\nVia: 1.1 proxy\r\n\r\n");
    out.append(req.body);
}

__attribute__((noinline)) PooledResponse* build_response_pool(RequestPool& pool,
                                                              const PooledRequest& req,
                                                              uint64_t upstream_sum) {
    SAMPLE_FRAME();
    PooledResponse* resp = pool.acquire_response();
    resp->headers.clear();
    resp->headers.set("Content-Type", "application/json");
    resp->headers.set("Cache-Control", "no-store");
    std::string& id = resp->headers.slots[resp->headers.count].value;
    resp->headers.set("X-Request-Id", "");
    id.clear();
    append_number(id, upstream_sum);
    resp->headers.set("Server", "proxy/1.0");
    std::string& body = resp->body;
    body.clear();
    body.append("{\"path\":\"").append(req.path).append("\",\"items\":[");
    for (int i = 0; i < 24; i++) {
        body.append("{\"id\":");
        append_number(body, static_cast<uint64_t>(i));
        body.append(",\"ok\":true},");
    }
    body.append("{}]}");
    std::string& length = resp->headers.slots[resp->headers.count].value;
    resp->headers.set("Content-Length", "");
    length.clear();
    append_number(length, body.size());
    return resp;
}

__attribute__((noinline)) uint64_t serialize_response_pool(PooledResponse& resp) {
    SAMPLE_FRAME();
    std::string& out = resp.wire;
    out.clear();
    out.append("HTTP/1.1 ");
    append_number(out, static_cast<uint64_t>(resp.status));
    out.append(" OK\r\n");
    for (size_t i = 0; i < resp.headers.count; i++)
        out.append(resp.headers.slots[i].name).append(": ").append(resp.headers.slots[i].value)
            .append("\r\n");
    out.append(resp.body);
    return checksum(out, 7);
}

__attribute__((noinline)) uint64_t handle_request_pool(RequestPool& pool, std::string_view raw) {
    SAMPLE_FRAME();
    PooledRequest* req = parse_request_pool(pool, raw);
    build_upstream_request_pool(*req);
    uint64_t sum = checksum(req->upstream, 0xcbf29ce484222325ULL);
    PooledResponse* resp = build_response_pool(pool, *req, sum);
    sum ^= serialize_response_pool(*resp);
    pool.release(resp);
    pool.release(req);
    return sum;
}

// ---------------------------------------------------------------- traffic and threads

std::vector<std::string> make_requests() {
    static const char* const kPaths[] = {"/api/v1/items", "/api/v1/users/42", "/static/app.js",
                                         "/login", "/api/v2/search?q=flame&page=3"};
    static const char* const kAgents[] = {"Mozilla/5.0 (X11; Linux x86_64) Firefox/126.0",
                                          "curl/8.5.0", "python-requests/2.31.0",
                                          "Mozilla/5.0 (Macintosh) Safari/605.1.15"};
    std::vector<std::string> out;
    for (uint32_t i = 0; i < 1024; i++) {
        uint32_t x = i * 2654435761u;
        std::string r = (x % 3 ? "GET " : "POST ") + std::string(kPaths[x % 5]) + " HTTP/1.1\r\n";
        r += "Host: shop.example.org\r\n";
        r += "User-Agent: " + std::string(kAgents[(x >> 4) % 4]) + "\r\n";
        r += "Accept: application/json, text/plain, */*\r\n";
        r += "Accept-Language: en-US,en;q=0.9,de;q=0.8\r\n";
        r += "Accept-Encoding: gzip, deflate, br\r\n";
        r += "Cookie: session=" + std::to_string(x) + "; theme=dark; consent=yes\r\n";
        r += "X-Client-Id: client-" + std::to_string(x % 977) + "\r\n";
        r += "Connection: keep-alive\r\n";
        r += "Content-Length: 64\r\n\r\n";
        r += std::string(64, static_cast<char>('a' + x % 26));
        out.push_back(std::move(r));
    }
    return out;
}

struct WorkerTotals {
    uint64_t requests = 0, checksum = 0;

    void merge(const WorkerTotals& t) {
        requests += t.requests;
        checksum ^= t.checksum;
    }
};

__attribute__((noinline)) void worker_loop(int index, bool pooled,
                                           const std::vector<std::string>& traffic,
                                           WorkerTotals& totals) {
    SAMPLE_FRAME();
    sample::name_thread("worker-" + std::to_string(index));
    RequestPool pool;
    size_t i = static_cast<size_t>(index) * 131;
    while (!sample::g_stop.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 64; k++) {
            std::string_view raw = traffic[i++ % traffic.size()];
            totals.checksum += pooled ? handle_request_pool(pool, raw) : handle_request_heap(raw);
            totals.requests++;
        }
    }
}

int main(int argc, char** argv) {
    sample::Options opt(argc, argv, "proxy", kUsage);
    std::string variant = opt.choice("alloc", {"heap", "pool"});
    double duration = opt.number("duration", 10, 0.1, 86400);
    int threads = static_cast<int>(opt.number("threads", 2, 1, 64));
    opt.done();
    const char* preload = std::getenv("LD_PRELOAD");
    std::string preloaded = preload ? preload : "";
    if (size_t slash = preloaded.rfind('/'); slash != std::string::npos)
        preloaded = preloaded.substr(slash + 1);

    std::vector<std::string> traffic = make_requests();
    sample::block_stop_signals();
    sample::Workers<WorkerTotals> workers(threads);
    workers.start(worker_loop, variant == "pool", std::cref(traffic));
    double seconds = workers.run_for(duration);

    const WorkerTotals& sum = workers.sum();
    sample::Result("proxy", variant, seconds, sum.requests, "requests")
        .add("threads", threads)
        .add("ld_preload", preloaded)
        .add("checksum", sum.checksum)
        .print();
    return 0;
}
