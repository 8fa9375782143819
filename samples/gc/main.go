// gc: a Go service's batch step. Every iteration builds a batch of small records (a few
// thousand per batch), scores them and links the best into a bounded live cache, so the garbage
// collector has a real heap to mark.
//
//	--alloc=heap  every record is a fresh heap object: the allocation rate keeps the GC busy and
//	              its background mark workers (runtime.gcBgMarkWorker) take a large share of CPU.
//	--alloc=pool  batches come from a sync.Pool and their records are reused in place: the same
//	              work allocates almost nothing and the GC runs rarely.
//
// Usage: gc [--alloc=heap|pool] [--duration S] [--threads N] [--batch N]
// GOMAXPROCS is 2. At exit prints one JSON line, e.g.
//
//	{"sample":"gc","variant":"heap","seconds":10.0,"work":123,"unit":"objects","rate":12.3,
//	 "num_gc":456,"gc_cpu_fraction":0.2,...}
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Record is the small object the service creates by the million.
type Record struct {
	ID    uint64
	Score float64
	Key   [16]byte
	Tags  [4]uint32
	Next  *Record
}

// Batch is one iteration's records.
type Batch struct {
	Records []*Record
	storage []Record // pool variant: the records live here and are reused
}

const cacheSize = 200000

// liveCache keeps the best records of recent batches alive (a ring of pointers).
type liveCache struct {
	mu    sync.Mutex
	slots []*Record
	next  int
}

func (c *liveCache) keep(r *Record) {
	c.mu.Lock()
	c.slots[c.next] = r
	c.next = (c.next + 1) % len(c.slots)
	c.mu.Unlock()
}

var (
	cache     = &liveCache{slots: make([]*Record, cacheSize)}
	batchPool = sync.Pool{New: func() any { return &Batch{} }}
	stop      atomic.Bool
)

//go:noinline
func newRecord(id uint64) *Record {
	r := &Record{ID: id}
	fillRecord(r, id)
	return r
}

//go:noinline
func fillRecord(r *Record, id uint64) {
	r.ID = id
	r.Next = nil
	x := id * 0x9e3779b97f4a7c15
	for i := range r.Key {
		r.Key[i] = byte('a' + (x>>(i*3))%26)
	}
	for i := range r.Tags {
		r.Tags[i] = uint32(x >> (i * 8))
	}
}

// buildBatchHeap allocates every record of the batch.
//
//go:noinline
func buildBatchHeap(first uint64, n int) *Batch {
	b := &Batch{Records: make([]*Record, n)}
	for i := 0; i < n; i++ {
		b.Records[i] = newRecord(first + uint64(i))
	}
	return b
}

// buildBatchPool takes a batch from the pool and refills its records in place.
//
//go:noinline
func buildBatchPool(first uint64, n int) *Batch {
	b := batchPool.Get().(*Batch)
	if len(b.storage) != n {
		b.storage = make([]Record, n)
		b.Records = make([]*Record, n)
		for i := range b.storage {
			b.Records[i] = &b.storage[i]
		}
	}
	for i := 0; i < n; i++ {
		fillRecord(&b.storage[i], first+uint64(i))
	}
	return b
}

// scoreBatch does the batch's real work: scores every record and links neighbours.
//
//go:noinline
func scoreBatch(b *Batch) float64 {
	total := 0.0
	for i, r := range b.Records {
		s := 0.0
		for _, k := range r.Key {
			s = s*1.0001 + float64(k)
		}
		for _, t := range r.Tags {
			s += float64(t&0xffff) * 1e-6
		}
		r.Score = s
		if i > 0 {
			r.Next = b.Records[i-1]
		}
		total += s
	}
	return total
}

// keepBest copies (pool) or links (heap) one record per 64 into the live cache.
//
//go:noinline
func keepBest(b *Batch, pooled bool) {
	for i := 0; i < len(b.Records); i += 64 {
		r := b.Records[i]
		if pooled {
			c := *r // the pooled record is reused: keep a copy
			c.Next = nil
			cache.keep(&c)
		} else {
			r.Next = nil
			cache.keep(r)
		}
	}
}

//go:noinline
func processBatch(first uint64, n int, pooled bool) float64 {
	var b *Batch
	if pooled {
		b = buildBatchPool(first, n)
	} else {
		b = buildBatchHeap(first, n)
	}
	total := scoreBatch(b)
	keepBest(b, pooled)
	if pooled {
		batchPool.Put(b)
	}
	return total
}

func worker(index int, n int, pooled bool, done *atomic.Uint64, wg *sync.WaitGroup) {
	defer wg.Done()
	id := uint64(index) << 40
	for !stop.Load() {
		processBatch(id, n, pooled)
		id += uint64(n)
		done.Add(uint64(n))
	}
}

// result is the one JSON line printed at exit (same leading fields as the C++ samples).
type result struct {
	Sample         string  `json:"sample"`
	Variant        string  `json:"variant"`
	Seconds        float64 `json:"seconds"`
	Work           uint64  `json:"work"`
	Unit           string  `json:"unit"`
	Rate           float64 `json:"rate"`
	CPUSeconds     float64 `json:"cpu_seconds"`
	WorkPerCPUSec  float64 `json:"work_per_cpu_second"`
	GOMAXPROCS     int     `json:"gomaxprocs"`
	Threads        int     `json:"threads"`
	NumGC          uint32  `json:"num_gc"`
	GCCPUFraction  float64 `json:"gc_cpu_fraction"`
	GCPauseTotalMs float64 `json:"gc_pause_total_ms"`
	HeapAllocMB    float64 `json:"heap_alloc_total_mb"`
}

func round(v float64, scale float64) float64 { return math.Round(v*scale) / scale }

// processCPUSeconds is the CPU time (user + system) of the whole process so far.
func processCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func main() {
	alloc := flag.String("alloc", "heap", "heap: a fresh object per record; pool: sync.Pool of batches")
	duration := flag.Float64("duration", 10, "run time in seconds; SIGINT/SIGTERM end it early")
	threads := flag.Int("threads", 2, "worker goroutines")
	batch := flag.Int("batch", 4096, "records per batch")
	flag.Parse()
	if *alloc != "heap" && *alloc != "pool" {
		fmt.Fprintf(os.Stderr, "gc: --alloc wants heap or pool, got %q\n", *alloc)
		os.Exit(2)
	}
	if *duration <= 0 || *threads < 1 || *batch < 1 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "gc: bad arguments (see --help)")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(2)
	pooled := *alloc == "pool"

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	start := time.Now()
	var done atomic.Uint64
	var wg sync.WaitGroup
	for i := 0; i < *threads; i++ {
		wg.Add(1)
		go worker(i+1, *batch, pooled, &done, &wg)
	}
	select {
	case <-time.After(time.Duration(*duration * float64(time.Second))):
	case <-signals:
	}
	stop.Store(true)
	wg.Wait()
	seconds := time.Since(start).Seconds()

	cpu := processCPUSeconds()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	work := done.Load()
	out := result{
		Sample:         "gc",
		Variant:        *alloc,
		Seconds:        round(seconds, 1000),
		Work:           work,
		Unit:           "objects",
		Rate:           round(float64(work)/seconds, 10),
		CPUSeconds:     round(cpu, 1000),
		WorkPerCPUSec:  round(float64(work)/math.Max(cpu, 1e-9), 10),
		GOMAXPROCS:     runtime.GOMAXPROCS(0),
		Threads:        *threads,
		NumGC:          ms.NumGC,
		GCCPUFraction:  round(ms.GCCPUFraction, 10000),
		GCPauseTotalMs: round(float64(ms.PauseTotalNs)/1e6, 1000),
		HeapAllocMB:    round(float64(ms.TotalAlloc)/(1<<20), 10),
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
}
