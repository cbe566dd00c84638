/* p_nvtx: NVTX domains, registered strings, categories, marks, start/end
 * ranges (one ended on another thread), in this order:
 *   EarlyDomain created before any CUDA call (replayed at trace creation)
 *   cudaMalloc(4096)                                  creates the trace
 *   domain MyLib; registered string "registered.message"
 *   MyLib push (registered, category 7)  depth 1; cudaMalloc(8192); pop depth 0
 *   MyLib push (ascii "ascii.in.domain") depth 1; pop depth 0
 *   nvtxMarkA("mark.default"); MyLib mark (ascii "mark.in.domain")
 *   EarlyDomain push "early.range" depth 1; pop depth 0
 *   id1 = nvtxRangeStartA("cross.range"); a second thread ends id1
 *   id2 = MyLib start (registered); MyLib end id2 (same thread)
 *   cudaFree(8192 block); cudaFree(4096 block)
 * Output: "id1=N id2=N main_tid=T ender_tid=T". */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "prog_util.h"

static nvtxRangeId_t g_id1;
static int g_ender_tid;

static void *
ender(void *arg)
{
    (void)arg;
    g_ender_tid = prog_gettid();
    nvtxRangeEnd(g_id1);
    return NULL;
}

static nvtxEventAttributes_t
ascii_attr(const char *msg, uint32_t category)
{
    nvtxEventAttributes_t at;
    memset(&at, 0, sizeof at);
    at.version = NVTX_VERSION;
    at.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    at.category = category;
    at.messageType = NVTX_MESSAGE_TYPE_ASCII;
    at.message.ascii = msg;
    return at;
}

int
main(void)
{
    void *p, *q;
    pthread_t th;

    nvtxDomainHandle_t early = nvtxDomainCreateA("EarlyDomain");
    OK(cudaMalloc(&p, 4096));
    nvtxDomainHandle_t dom = nvtxDomainCreateA("MyLib");
    nvtxStringHandle_t s = nvtxDomainRegisterStringA(dom, "registered.message");

    nvtxEventAttributes_t reg;
    memset(&reg, 0, sizeof reg);
    reg.version = NVTX_VERSION;
    reg.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    reg.category = 7;
    reg.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    reg.message.registered = s;

    nvtxDomainRangePushEx(dom, &reg);
    OK(cudaMalloc(&q, 8192));
    nvtxDomainRangePop(dom);

    nvtxEventAttributes_t a1 = ascii_attr("ascii.in.domain", 0);
    nvtxDomainRangePushEx(dom, &a1);
    nvtxDomainRangePop(dom);

    nvtxMarkA("mark.default");
    nvtxEventAttributes_t a2 = ascii_attr("mark.in.domain", 0);
    nvtxDomainMarkEx(dom, &a2);

    nvtxEventAttributes_t a3 = ascii_attr("early.range", 0);
    nvtxDomainRangePushEx(early, &a3);
    nvtxDomainRangePop(early);

    g_id1 = nvtxRangeStartA("cross.range");
    if (pthread_create(&th, NULL, ender, NULL) != 0) {
        printf("FAIL: pthread_create\n");
        return 3;
    }
    pthread_join(th, NULL);

    nvtxRangeId_t id2 = nvtxDomainRangeStartEx(dom, &reg);
    nvtxDomainRangeEnd(dom, id2);

    OK(cudaFree(q));
    OK(cudaFree(p));
    printf("id1=%llu id2=%llu main_tid=%d ender_tid=%d\n", (unsigned long long)g_id1,
           (unsigned long long)id2, prog_gettid(), g_ender_tid);
    printf("done\n");
    return 0;
}
