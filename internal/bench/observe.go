package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// scrapeMetrics reads the consumer's Prometheus text exposition: each
// family's samples summed over their labels, and each series by its full
// name (name{labels}).
func scrapeMetrics(addr string) (map[string]float64, error) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[name] += v
			if name != line[:i] {
				out[line[:i]] = v // the series too
			}
		}
	}
	return out, sc.Err()
}

// seriesWith sums the series of family that have every one of labels
// (name="value") among their labels.
func seriesWith(m map[string]float64, family string, labels ...string) float64 {
	sum := 0.0
series:
	for k, v := range m {
		have, ok := strings.CutPrefix(k, family+"{")
		if !ok {
			continue
		}
		pairs := strings.Split(strings.TrimSuffix(have, "}"), ",")
		for _, l := range labels {
			if !slices.Contains(pairs, l) {
				continue series
			}
		}
		sum += v
	}
	return sum
}

// storedCommits is how many offset commits the runtime made right after
// offsets were stored and Kafka took (not the ones that found nothing to
// commit or failed).
func storedCommits(m map[string]float64) float64 {
	return seriesWith(m, "pin_consumer_offset_commits_total", `trigger="stored"`, `result="committed"`)
}

// consumerLog is what the consumer's JSON log lines say: when each message
// reached its final state (the outcome line is written right after the
// database commit), the first and last of the max run, and the warnings.
type consumerLog struct {
	at       map[msgPos]time.Time // messages of the paced run
	first    time.Time
	lastMax  time.Time
	maxRun   int
	warnings map[string]int
}

func readConsumerLog(path string, end []int64) (*consumerLog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	lg := &consumerLog{at: map[msgPos]time.Time{}, warnings: map[string]int{}}
	var line struct {
		Time      time.Time `json:"time"`
		Level     string    `json:"level"`
		Message   string    `json:"message"`
		Partition *int32    `json:"partition"`
		Offset    *int64    `json:"offset"`
		Outcome   string    `json:"outcome"`
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 256*1024), 4<<20)
	outcomeKey, warnKey, errKey := []byte(`"outcome":`), []byte(`"level":"warn"`), []byte(`"level":"error"`)
	for sc.Scan() {
		raw := sc.Bytes()
		isOutcome := bytes.Contains(raw, outcomeKey)
		if !isOutcome && !bytes.Contains(raw, warnKey) && !bytes.Contains(raw, errKey) {
			continue
		}
		line.Partition, line.Offset, line.Outcome, line.Message, line.Level = nil, nil, "", "", ""
		if json.Unmarshal(raw, &line) != nil {
			continue
		}
		if line.Level == "warn" || line.Level == "error" {
			lg.warnings[line.Level+": "+line.Message]++
		}
		if line.Outcome == "" || line.Partition == nil || line.Offset == nil {
			continue
		}
		p, o := *line.Partition, *line.Offset
		if int(p) < len(end) && o < end[p] {
			lg.maxRun++
			if lg.first.IsZero() || line.Time.Before(lg.first) {
				lg.first = line.Time
			}
			if line.Time.After(lg.lastMax) {
				lg.lastMax = line.Time
			}
			continue
		}
		if _, seen := lg.at[msgPos{p, o}]; !seen {
			lg.at[msgPos{p, o}] = line.Time
		}
	}
	return lg, sc.Err()
}

// assignedAt returns the time of the consumer's first "partitions
// assigned" log line.
func assignedAt(path string) (time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 256*1024), 4<<20)
	for sc.Scan() {
		if !bytes.Contains(sc.Bytes(), []byte(`"partitions assigned"`)) {
			continue
		}
		var line struct {
			Time time.Time `json:"time"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return time.Time{}, err
		}
		return line.Time, nil
	}
	if err := sc.Err(); err != nil {
		return time.Time{}, err
	}
	return time.Time{}, fmt.Errorf("%s: no \"partitions assigned\" line", path)
}
