/* fuzz_plot.c - `towertrain plot`'s readers: stats.json (cJSON) and the
 * TensorBoard event files (plot.c's record framing and protobuf fields).
 * Input: one flags byte, two bytes (little-endian) for the length L of
 * stats.json, stats.json (L bytes, fewer if the input ends), then the event
 * file. Flags bit 0 clear: the rest is the event file as is. Set: the rest
 * is records, each a 4-byte length the record claims, a 1-byte length of the
 * bytes that follow and those bytes, framed here as TensorBoard frames them
 * (length, its masked CRC-32C, the bytes, theirs), so inputs reach the
 * protobuf parser; then flags >> 1 bytes are cut off the file's end (a run
 * still writing). When the plot is written it must be one whole SVG. */
#include "tests/fuzz/fuzz_common.h"

#include <locale.h>
#include <wchar.h>

#include "plot/plot.h"
#include "util/crc32c.h"
#include "util/fileio.h"

static void put_u32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4); /* little-endian, as the files are (x86) */
}

static void clean(const char *dir)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/events.out.tfevents.1.fuzz", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/stats.json", dir);
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int flags;
    size_t l;
    if (!fuzz_head(&data, &size, &flags, &l))
        return 0;
    const char *dir = fuzz_dir();
    clean(dir);
    fuzz_write("stats.json", data, l);
    data += l;
    size -= l;
    uint8_t *ev = NULL;
    size_t n = size;
    if (flags & 1) {
        ev = malloc(size * 4 + 1); /* each record of k + 5 input bytes takes k + 16 */
        if (ev == NULL)
            return 0;
        n = 0;
        while (size >= 5) {
            uint32_t claim32;
            memcpy(&claim32, data, 4);
            uint64_t claim = claim32;
            size_t k = data[4] < size - 5 ? data[4] : size - 5;
            memcpy(ev + n, &claim, 8);
            put_u32(ev + n + 8, crc32c_mask(crc32c_update(0, ev + n, 8)));
            memcpy(ev + n + 12, data + 5, k);
            put_u32(ev + n + 12 + k, crc32c_mask(crc32c_update(0, data + 5, k)));
            n += 16 + k;
            data += 5 + k;
            size -= 5 + k;
        }
        size_t cut = (size_t)(flags >> 1);
        n = cut < n ? n - cut : 0;
    }
    fuzz_write("events.out.tfevents.1.fuzz", ev != NULL ? ev : data, n);
    free(ev);
    char svg[256];
    snprintf(svg, sizeof(svg), "%s/plot.svg", dir);
    unlink(svg);
    tt_err err = { 0 };
    int rc = plot_logdir_svg(dir, svg, &err);
    fuzz_check_error(&err, rc);
    if (rc != 0)
        return 0;
    /* written whole (the XML declaration first, the closing tag last), and
     * every character one XML 1.0 admits (glibc's UTF-8 decoder, not
     * plot.c's: surrogates and overlong forms refused, the rest checked
     * here), so a viewer parses it */
    char *text = NULL;
    size_t len = 0;
    tt_err rerr = { 0 };
    if (file_read_all(svg, &text, &len, &rerr) != 0 || len < 12 || memcmp(text, "<?xml", 5) != 0 ||
        memcmp(text + len - 7, "</svg>\n", 7) != 0)
        abort();
    if (setlocale(LC_CTYPE, "C.UTF-8") == NULL)
        abort();
    mbstate_t st;
    memset(&st, 0, sizeof(st));
    for (size_t i = 0; i < len;) {
        wchar_t w;
        size_t k = mbrtowc(&w, text + i, len - i, &st);
        if (k == 0 || k > 4 || (w < 0x20 && w != '\n') || w == 0xfffe || w == 0xffff ||
            w > 0x10ffff) {
            fprintf(stderr, "fuzz: the SVG is not XML at byte %zu\n", i);
            abort();
        }
        i += k;
    }
    free(text);
    return 0;
}
